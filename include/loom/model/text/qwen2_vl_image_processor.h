#pragma once

// Qwen2-VL's image processor, as Qwen2.5-VL's processor runs it on a PIL image: the image resized
// (PIL bicubic) so both sides are multiples of patch_size x merge_size and its area within
// [min_pixels, max_pixels] (smart_resize), rescaled to [0, 1], normalised with CLIP's mean and
// std, then cut into patch_size x patch_size patches repeated temporal_patch_size times (a still
// image is a clip of identical frames), ordered by merge_size x merge_size groups so that each
// group of merge_size^2 rows becomes one language-model token after the vision tower's merger.
//
// ref: transformers models/qwen2_vl/image_processing_pil_qwen2_vl.py::{smart_resize,
//      Qwen2VLImageProcessorPil._preprocess, patchify}

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <utility>

namespace loom {

struct Qwen2VLImageProcessorConfig {
    int64_t min_pixels = 56 * 56;
    int64_t max_pixels = 28 * 28 * 1280;
    int64_t patch_size = 14;
    int64_t temporal_patch_size = 2;
    int64_t merge_size = 2;
    std::array<double, 3> image_mean = {0.48145466, 0.4578275, 0.40821073};
    std::array<double, 3> image_std = {0.26862954, 0.26130258, 0.27577711};
    double rescale_factor = 1.0 / 255.0;
    bool do_resize = true;
};

// An image's patches: pixel_values [grid_h x grid_w, 3 x temporal x patch x patch] float32 and
// its grid (1, grid_h, grid_w) in patches.
struct VisionPatches {
    at::Tensor pixel_values;
    int64_t grid_t = 1, grid_h = 0, grid_w = 0;
    // The language-model tokens the image becomes: grid_h x grid_w / merge_size^2.
    int64_t tokens(int64_t merge_size) const {
        return grid_t * grid_h * grid_w / (merge_size * merge_size);
    }
};

// smart_resize: (height, width) rounded to multiples of `factor`, scaled into the pixel range.
// An aspect ratio above 200 is an Error, as in the reference.
std::pair<int64_t, int64_t> qwen2_vl_smart_resize(int64_t height, int64_t width, int64_t factor,
                                                  int64_t min_pixels, int64_t max_pixels);

// `image` (uint8 [H, W, 3] on the host) as the processor's patches.
VisionPatches qwen2_vl_patches(const Qwen2VLImageProcessorConfig& config, const at::Tensor& image);

// A processor folder's preprocessor_config.json (or processor_config.json's "image_processor",
// as transformers 5 saves a processor); what loom does not build (another resampling filter, no
// rescaling or normalisation) is a FormatError naming the key.
Qwen2VLImageProcessorConfig read_qwen2_vl_image_processor(const std::filesystem::path& folder);

}  // namespace loom
