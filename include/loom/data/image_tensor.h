#pragma once

// Images as tensors: the form the VAE takes. Tensors made here are host-resident (created inside
// a HostAllocations scope, device/host_memory.h), so loader buffers never count against the
// simulated device's budget; the trainer moves them to the device.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <vector>

#include "loom/data/bucket.h"
#include "loom/data/image.h"

namespace loom::data {

struct ImageRecord;

// float32 [3, H, W], value = byte / 127.5 - 1, so 0 -> -1 and 255 -> 1.
at::Tensor image_to_tensor(const Image& image);
// The image's bytes as uint8 [H, W, 3]: what a pipeline that resizes an image itself takes
// (Qwen-Image-Edit's control images).
at::Tensor rgb8_tensor(const Image& image);
// The inverse for [3, H, W] (or [1, 3, H, W]) tensors of any float dtype and device: clamped to
// [-1, 1], (v + 1) * 127.5 rounded to nearest.
Image tensor_to_image(const at::Tensor& tensor);

// An image fitted to `bucket` (scale + centre crop) and flipped as asked, as image_to_tensor.
at::Tensor fitted_tensor(const Image& image, BucketSize bucket, bool flip_x, bool flip_y);
// The image file at `path` fitted to `size`, unflipped: a control image a preview or `loom
// sample` edits. Throws what read_image throws.
at::Tensor read_fitted_image(const std::filesystem::path& path, BucketSize size);
// A clip's frames each fitted and flipped so: [3, F, H, W] for several frames, [3, H, W] (an
// image's shape) for one.
at::Tensor fitted_clip_tensor(const std::vector<Image>& frames, BucketSize bucket, bool flip_x,
                              bool flip_y);

// What the trainer feeds the VAE for one item: the image read from disk, or a clip's frames at
// `frame_indices` decoded (data/clip_frames.h chooses them), as the two above. Throws like
// read_image and read_video_frames.
at::Tensor load_item_tensor(const ImageRecord& image, BucketSize bucket, bool flip_x, bool flip_y,
                            const std::vector<std::int64_t>& frame_indices = {});

}  // namespace loom::data
