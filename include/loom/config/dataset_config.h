#pragma once

// One entry of a process's `datasets:` list (ai-toolkit.md §1): the folder, its captions, its
// resolutions and the per-dataset training choices. Its keys are listed once, in `fields(v)`
// (config/job.h says how that list is read, written and compared).

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/config/choices.h"
#include "loom/config/field_rules.h"

namespace loom::config {

struct DatasetConfig {
    std::string folder_path;
    std::string caption_ext = ".txt";  // resolved with a leading dot, as ai-toolkit adds it
    std::optional<std::string> default_caption;
    std::optional<std::string> trigger_word;  // resolved: the process trigger_word when absent
    double caption_dropout_rate = 0.0;
    bool shuffle_tokens = false;
    int keep_tokens = 0;
    std::vector<int> resolution = {512};  // an int or a list; one dataset copy per entry
    bool buckets = true;
    int bucket_tolerance = 64;  // like ai-toolkit, replaced by the model's divisibility
    bool flip_x = false;
    bool flip_y = false;
    int num_repeats = 1;
    std::optional<int> batch_size;  // overrides train.batch_size for this dataset
    bool cache_latents = false;
    bool cache_latents_to_disk = false;
    bool cache_text_embeddings = false;
    int num_workers = 2;
    // Video datasets (num_frames > 1 or auto_frame_count; a video model only): clips of
    // num_frames frames (1 + 4k for Wan), spread over the whole clip (shrink_video_to_frames) or
    // read at `fps`; with auto_frame_count each clip's length at `fps`, at most num_frames.
    int num_frames = 1;
    bool shrink_video_to_frames = true;
    int fps = 24;
    bool auto_frame_count = false;
    bool trim_auto_frame_count_tail = true;
    // Paired control images (an arch with control_images: Kontext): the image of the same stem
    // in this folder is what each training image was edited from. Captions stay beside the
    // training images. ai-toolkit takes a folder or a list of them (Qwen-Image-Edit-2509 pairs
    // several); Kontext takes one.
    std::vector<std::string> control_path;
    // Paired inpaint images (Flex.2): PNG or WebP files of the same stems whose alpha is 0 where
    // the model learns to inpaint and 255 where it keeps the image. One folder.
    std::vector<std::string> inpaint_path;

    bool is_video() const { return num_frames > 1 || auto_frame_count; }
    bool has_controls() const { return !control_path.empty(); }
    bool has_inpaint() const { return !inpaint_path.empty(); }

    template <class V>
    static void fields(V& v) {
        v("folder_path", &DatasetConfig::folder_path,
          Required{"the folder of training images and caption files"});
        v("caption_ext", &DatasetConfig::caption_ext);
        v("default_caption", &DatasetConfig::default_caption);
        v("trigger_word", &DatasetConfig::trigger_word);
        v("caption_dropout_rate", &DatasetConfig::caption_dropout_rate, AtLeast{0}, AtMost{1});
        v("shuffle_tokens", &DatasetConfig::shuffle_tokens);
        v("keep_tokens", &DatasetConfig::keep_tokens, AtLeast{0});
        v("resolution", &DatasetConfig::resolution, AtLeast{64}, MinItems{1});
        v("buckets", &DatasetConfig::buckets,
          NotYetUnlessDefault{"loom always buckets by aspect ratio"});
        v("bucket_tolerance", &DatasetConfig::bucket_tolerance, AtLeast{1});
        v("flip_x", &DatasetConfig::flip_x);
        v("flip_y", &DatasetConfig::flip_y);
        v("num_repeats", &DatasetConfig::num_repeats, AtLeast{1});
        v("batch_size", &DatasetConfig::batch_size, AtLeast{1});
        v("cache_latents", &DatasetConfig::cache_latents);
        v("cache_latents_to_disk", &DatasetConfig::cache_latents_to_disk);
        v("cache_text_embeddings", &DatasetConfig::cache_text_embeddings);
        v("num_workers", &DatasetConfig::num_workers, AtLeast{0});
        v("num_frames", &DatasetConfig::num_frames, AtLeast{1});
        v("shrink_video_to_frames", &DatasetConfig::shrink_video_to_frames);
        v("fps", &DatasetConfig::fps, AtLeast{1});
        v("auto_frame_count", &DatasetConfig::auto_frame_count);
        v("trim_auto_frame_count_tail", &DatasetConfig::trim_auto_frame_count_tail);
        v("control_path", &DatasetConfig::control_path);
        v("inpaint_path", &DatasetConfig::inpaint_path);
        v.not_yet({"dataset_path",
                   "caption_type",
                   "random_triggers",
                   "random_triggers_max",
                   "token_dropout_rate",
                   "scale",
                   "random_crop",
                   "random_scale",
                   "square_crop",
                   "is_reg",
                   "prefetch_factor",
                   "cache_latents_num_workers",
                   "cache_tensors_to_disk",
                   "cache_clip_vision_to_disk",
                   "do_i2v",
                   "do_audio",
                   "audio_normalize",
                   "audio_preserve_pitch",
                   "control_path_1",
                   "control_path_2",
                   "control_path_3",
                   "mask_path",
                   "alpha_mask",
                   "unconditional_path",
                   "controls",
                   "control_from_same_folder",
                   "augments",
                   "augmentations",
                   "clip_image_path"});
        // The UI's values, and ai-toolkit's defaults: a LoRA at full strength, the loss as is.
        v.not_yet(NotYetUnlessValue{"network_weight", {"1", "1.0"}});
        v.not_yet(NotYetUnlessValue{"loss_multiplier", {"1", "1.0"}});
        // They tune the mask of mask_path, which the UI writes as null.
        v.not_yet(NotYetFeature{"mask_path", nullptr, {"mask_min_value", "invert_mask"}});
    }
};

}  // namespace loom::config
