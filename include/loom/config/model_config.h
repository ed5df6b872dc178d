#pragma once

// The process's `model:` section (ai-toolkit.md §1): the base model, its arch, quantization and
// low_vram. Keys listed once, in `fields(v)` (config/job.h).

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/config/choices.h"
#include "loom/config/field_rules.h"

namespace loom::config {

// `model.model_kwargs`: the family-specific keys ai-toolkit passes to the model.
struct ModelKwargs {
    // Wan 2.2 14B: which experts get a LoRA (ai-toolkit's wan22_14b_model.py; both by default,
    // at least one).
    bool train_high_noise = true;
    bool train_low_noise = true;
    // Flex.2: the chance that an item trains with its control channels zeroed (no control
    // image), as ai-toolkit's Flex2.condition_noisy_latents drops it.
    double control_dropout = 0;
    // Flex.2 with inpaint images (datasets' inpaint_path): the chance that an item trains
    // without its inpaint image (the "inpaint everything" input), and that its mask is inverted
    // (the kept area inpainted instead), as ai-toolkit draws them.
    double inpaint_dropout = 0;
    double invert_inpaint_mask_chance = 0;
    // Qwen-Image-Edit-2509: the control images' latents at the target's area (each at its own
    // aspect) instead of about a megapixel, as ai-toolkit's qwen_image_edit_plus.py allows.
    bool match_target_res = false;

    template <class V>
    static void fields(V& v) {
        v("train_high_noise", &ModelKwargs::train_high_noise);
        v("train_low_noise", &ModelKwargs::train_low_noise);
        v("control_dropout", &ModelKwargs::control_dropout, AtLeast{0}, AtMost{1});
        v("inpaint_dropout", &ModelKwargs::inpaint_dropout, AtLeast{0}, AtMost{1});
        v("invert_inpaint_mask_chance", &ModelKwargs::invert_inpaint_mask_chance, AtLeast{0},
          AtMost{1});
        v("match_target_res", &ModelKwargs::match_target_res);
        // The other families' model_kwargs ai-toolkit reads (Flex.2's inpainting, HiDream's
        // Llama, Qwen-Image-Edit's sizes, ...): each warned about where it is written. Flex.2's
        // random masks (inpaint_random_chance, do_random_inpainting: blobs in place of an
        // image's mask) and their random blur and dilation are among them.
        v.not_yet({"inpaint_random_chance", "do_random_inpainting", "random_blur_mask",
                   "random_dialate_mask", "llama_model_path", "vae_path", "text_encoder_path",
                   "static_shift", "use_image_refiner", "train_text_conditioner",
                   "max_sequence_length", "vlm_max_pixels", "vlm_max_side_length",
                   "control_image_max_pixels", "checkpoint_filename", "vl_cond_long_edge", "edit",
                   "cfg_renormalization"});
    }
};

struct ModelConfig {
    std::string name_or_path;
    std::optional<std::string> arch;  // resolved from the legacy is_* flags when absent
    bool is_v2 = false;
    bool is_v3 = false;
    bool is_xl = false;
    bool is_flux = false;
    bool is_pixart = false;
    bool is_pixart_sigma = false;
    bool is_auraflow = false;
    bool is_lumina2 = false;
    bool is_ssd = false;
    bool is_vega = false;
    bool is_v_pred = false;
    std::string dtype = "float16";  // resolved: train.dtype, as ai-toolkit overwrites it
    bool quantize = false;
    std::string qtype = "qfloat8";
    std::optional<bool> quantize_te;  // resolved: quantize when absent
    std::string qtype_te = "qfloat8";
    bool low_vram = false;
    // ai-toolkit's per-layer streaming from host memory (`auto_memory`, its deprecated name): loom
    // starts at low_vram level 3, whose block streaming is that (train/low_vram.h). The
    // transformer percent becomes the share of the denoiser's blocks that stream, the first ones
    // of the streaming order (ai-toolkit picks layers at random); the text encoders compute on
    // the host for caching at level 3 whatever their percent.
    bool layer_offloading = false;
    double layer_offloading_transformer_percent = 1.0;
    double layer_offloading_text_encoder_percent = 1.0;
    ModelKwargs model_kwargs;
    // A LoRA merged into the base for training and taken out of previews
    // (lora/assistant_adapter.h).
    std::optional<std::string> assistant_lora_path;

    template <class V>
    static void fields(V& v) {
        v("name_or_path", &ModelConfig::name_or_path,
          Required{"the base model: a diffusers model folder"});
        v("arch", &ModelConfig::arch);
        v("is_v2", &ModelConfig::is_v2);
        v("is_v3", &ModelConfig::is_v3);
        v("is_xl", &ModelConfig::is_xl);
        v("is_flux", &ModelConfig::is_flux);
        v("is_pixart", &ModelConfig::is_pixart);
        v("is_pixart_sigma", &ModelConfig::is_pixart_sigma);
        v("is_auraflow", &ModelConfig::is_auraflow);
        v("is_lumina2", &ModelConfig::is_lumina2);
        v("is_ssd", &ModelConfig::is_ssd);
        v("is_vega", &ModelConfig::is_vega);
        v("is_v_pred", &ModelConfig::is_v_pred);
        v("dtype", &ModelConfig::dtype);
        // Starts the run at low_vram level 2: the base's Linear/Conv2d weights in `qtype`.
        v("quantize", &ModelConfig::quantize);
        v("qtype", &ModelConfig::qtype);
        v("quantize_te", &ModelConfig::quantize_te);
        v("qtype_te", &ModelConfig::qtype_te);
        v("low_vram", &ModelConfig::low_vram);
        v("layer_offloading", &ModelConfig::layer_offloading, Alias{"auto_memory"});
        v("layer_offloading_transformer_percent",
          &ModelConfig::layer_offloading_transformer_percent, AtLeast{0.0}, AtMost{1.0});
        v("layer_offloading_text_encoder_percent",
          &ModelConfig::layer_offloading_text_encoder_percent, AtLeast{0.0}, AtMost{1.0});
        v("model_kwargs", &ModelConfig::model_kwargs);
        v("assistant_lora_path", &ModelConfig::assistant_lora_path);
        v.not_yet({"quantize_kwargs",
                   "te_device",
                   "te_dtype",
                   "vae_device",
                   "vae_dtype",
                   "vae_path",
                   "te_name_or_path",
                   "extras_name_or_path",
                   "unet_path",
                   "model_paths",
                   "lora_path",
                   "inference_lora_path",
                   "unconditional_lora_path",
                   "accuracy_recovery_adapter",
                   "compile",
                   "block_compile",
                   "compile_mode",
                   "compile_fullgraph",
                   "compile_dynamic",
                   "cache_size_limit",
                   "split_model_over_gpus",
                   "attn_masking",
                   "ignore_if_contains",
                   "only_if_contains",
                   "text_encoder_bits",
                   "use_text_encoder_1",
                   "use_text_encoder_2",
                   "refiner_name_or_path",
                   "refiner_start_at",
                   "in_context"});
    }
};

}  // namespace loom::config
