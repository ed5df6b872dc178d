#pragma once

// Typed job configuration: the ai-toolkit job schema (../shared/reference/ai-toolkit.md §1) plus
// loom's own `oom:` and `perf:` blocks. Defaults equal ai-toolkit's for every key loom implements.
//
// Each struct lists its keys once, in `fields(v)`, as member pointers with their rules; the
// reader, the emitter and the comparer all walk that one list, so a key cannot be read but not
// written, or compared but not read. `v.not_yet({...})` names the ai-toolkit keys of that section
// that loom does not implement yet: they get a distinct warning instead of "unknown key".

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/config/choices.h"
#include "loom/config/field_rules.h"

namespace loom::config {

// A device memory size written as "8GiB", "96MiB", "1.5GB" or a byte count.
struct MemorySize {
    std::uint64_t bytes = 0;
    bool operator==(const MemorySize& other) const { return bytes == other.bytes; }
};

// A free-form string map (the top-level `meta:` block, copied into safetensors metadata).
// Non-string YAML values are kept as their JSON text, as ai-toolkit does.
using StringMap = std::vector<std::pair<std::string, std::string>>;

struct NetworkKwargs {
    std::vector<std::string> only_if_contains;
    std::vector<std::string> ignore_if_contains;  // wins over only_if_contains
    // loom: which UNet modules get a LoRA (lora/target_rules.h): ai-toolkit's (every Linear and
    // 1x1 conv of the UNet) or kohya's (the transformer blocks; with conv, the resnets too).
    std::string module_set = "ai-toolkit";

    template <class V>
    static void fields(V& v) {
        v("only_if_contains", &NetworkKwargs::only_if_contains);
        v("module_set", &NetworkKwargs::module_set, OneOf{{"ai-toolkit", "kohya"}});
        v("ignore_if_contains", &NetworkKwargs::ignore_if_contains);
        v.not_yet({"full_if_contains", "parameter_threshold"});
    }
};

struct NetworkConfig {
    std::string type = "lora";
    int linear = 4;  // rank of Linear and 1x1 conv LoRAs
    double alpha = 1.0;
    std::optional<double> linear_alpha;  // resolved: `alpha` when absent
    std::optional<int> conv;             // rank of 3x3 conv LoRAs; convs are targeted only if set
    std::optional<double> conv_alpha;    // resolved: `conv` when absent
    std::optional<double> dropout;
    NetworkKwargs network_kwargs;
    bool transformer_only = true;
    std::optional<std::string> pretrained_lora_path;

    template <class V>
    static void fields(V& v) {
        v("type", &NetworkConfig::type,
          // ai-toolkit trains every type but lokr/dora/fullrank as a plain LoRA: "lierla"
          // (kohya's name for it, in ai-toolkit's slider example) is one.
          OneOf{{"lora", "lierla"}, {"locon", "lycoris", "lokr", "dora", "fullrank", "lorm"}});
        v("linear", &NetworkConfig::linear, AtLeast{1}, Alias{"rank"});
        v("alpha", &NetworkConfig::alpha, AtLeast{0});
        v("linear_alpha", &NetworkConfig::linear_alpha, AtLeast{0});
        v("conv", &NetworkConfig::conv, AtLeast{1});
        v("conv_alpha", &NetworkConfig::conv_alpha, AtLeast{0});
        v("dropout", &NetworkConfig::dropout, AtLeast{0}, Below{1});
        v("network_kwargs", &NetworkConfig::network_kwargs);
        v("transformer_only", &NetworkConfig::transformer_only);
        v("pretrained_lora_path", &NetworkConfig::pretrained_lora_path);
        v.not_yet({"lokr_full_rank", "lokr_factor", "old_lokr_format", "split_multistage_loras",
                   "layer_offloading", "all_layers", "lorm"});
    }
};

struct SaveConfig {
    int save_every = 1000;
    std::string dtype = "float16";
    int max_step_saves_to_keep = 5;
    // loom: the LoRA key layout, kohya (lora_unet_...) or peft; resolved: kohya for SD, peft
    // (diffusers' transformer.… names, as ai-toolkit saves) for Flux.
    std::optional<std::string> format;
    std::string save_format = "safetensors";
    bool push_to_hub = false;
    std::optional<std::string> hf_repo_id;
    bool hf_private = false;

    template <class V>
    static void fields(V& v) {
        v("save_every", &SaveConfig::save_every, AtLeast{1});
        v("dtype", &SaveConfig::dtype,
          OneOf{{"float16", "fp16", "half", "bf16", "bfloat16", "float32", "fp32", "float",
                 "single"}});
        v("max_step_saves_to_keep", &SaveConfig::max_step_saves_to_keep, AtLeast{0});
        v("format", &SaveConfig::format, OneOf{{"kohya", "peft"}});
        v("save_format", &SaveConfig::save_format,
          OneOf{{"safetensors"}, {"diffusers"}, "it only affects full fine-tunes"});
        v("push_to_hub", &SaveConfig::push_to_hub, NotYetUnlessDefault{"nothing is uploaded"});
        v("hf_repo_id", &SaveConfig::hf_repo_id, NotYetUnlessDefault{"nothing is uploaded"});
        v("hf_private", &SaveConfig::hf_private, NotYetUnlessDefault{"nothing is uploaded"});
    }
};

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

    bool is_video() const { return num_frames > 1 || auto_frame_count; }

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
                   "network_weight",
                   "loss_multiplier",
                   "prefetch_factor",
                   "cache_latents_num_workers",
                   "cache_tensors_to_disk",
                   "cache_clip_vision_to_disk",
                   "do_i2v",
                   "do_audio",
                   "audio_normalize",
                   "audio_preserve_pitch",
                   "control_path",
                   "control_path_1",
                   "control_path_2",
                   "control_path_3",
                   "inpaint_path",
                   "mask_path",
                   "mask_min_value",
                   "invert_mask",
                   "alpha_mask",
                   "unconditional_path",
                   "controls",
                   "control_from_same_folder",
                   "augments",
                   "augmentations",
                   "clip_image_path"});
    }
};

struct EmaConfig {
    bool use_ema = false;
    double ema_decay = 0.999;

    template <class V>
    static void fields(V& v) {
        v("use_ema", &EmaConfig::use_ema);
        v("ema_decay", &EmaConfig::ema_decay, Above{0}, Below{1});
        v.not_yet({"use_feedback", "param_multiplier"});
    }
};

struct OptimizerParams {
    // Absent: each optimizer's own default, which ai-toolkit passes through (AdamW and 8-bit
    // AdamW 0.01, Prodigy 0).
    std::optional<double> weight_decay;
    std::vector<double> betas = {0.9, 0.999};
    double eps = 1e-6;  // ai-toolkit builds AdamW, AdamW8bit and Prodigy with eps=1e-6
    // Prodigy's (prodigyopt's names and defaults).
    std::optional<double> beta3;  // sqrt(beta2) when absent
    double d0 = 1e-6;
    double d_coef = 1.0;
    std::optional<double> growth_rate;  // unbounded when absent
    bool decouple = true;
    bool use_bias_correction = false;
    bool safeguard_warmup = false;

    template <class V>
    static void fields(V& v) {
        v("weight_decay", &OptimizerParams::weight_decay, AtLeast{0});
        v("betas", &OptimizerParams::betas, AtLeast{0}, Below{1}, MinItems{2});
        v("eps", &OptimizerParams::eps, Above{0});
        v("beta3", &OptimizerParams::beta3, AtLeast{0}, Below{1});
        v("d0", &OptimizerParams::d0, Above{0});
        v("d_coef", &OptimizerParams::d_coef, Above{0});
        v("growth_rate", &OptimizerParams::growth_rate, Above{0});
        v("decouple", &OptimizerParams::decouple);
        v("use_bias_correction", &OptimizerParams::use_bias_correction);
        v("safeguard_warmup", &OptimizerParams::safeguard_warmup);
    }
};

struct LrSchedulerParams {
    std::optional<int> num_warmup_steps;  // constant_with_warmup; ai-toolkit's default is 1000

    template <class V>
    static void fields(V& v) {
        v("num_warmup_steps", &LrSchedulerParams::num_warmup_steps, AtLeast{0});
        v.not_yet({"T_max", "eta_min", "T_0", "T_mult", "step_size", "gamma", "total_iters",
                   "num_cycles", "power"});
    }
};

struct TrainConfig {
    int steps = 1000;
    double lr = 1e-6;
    std::optional<double> unet_lr;  // defaults to lr
    std::optional<double> text_encoder_lr;
    int batch_size = 1;
    std::string optimizer = "adamw";
    OptimizerParams optimizer_params;
    std::string lr_scheduler = "constant";
    LrSchedulerParams lr_scheduler_params;
    std::string dtype = "fp32";
    std::string noise_scheduler = "ddpm";
    std::string timestep_type = "sigmoid";
    std::string content_or_style = "balanced";
    int min_denoising_steps = 0;
    int max_denoising_steps = 999;
    std::string loss_type = "mse";
    double max_grad_norm = 1.0;
    bool gradient_checkpointing = true;
    bool train_unet = true;
    bool train_text_encoder = false;
    int gradient_accumulation = 1;
    int gradient_accumulation_steps = 1;  // ai-toolkit's legacy per-micro-batch accumulation
    bool skip_first_sample = false;
    bool force_first_sample = false;
    bool disable_sampling = false;
    double noise_offset = 0.0;
    EmaConfig ema_config;
    bool cache_text_embeddings = false;

    template <class V>
    static void fields(V& v) {
        v("steps", &TrainConfig::steps, AtLeast{1});
        v("lr", &TrainConfig::lr, Above{0});
        v("unet_lr", &TrainConfig::unet_lr, Above{0});
        v("text_encoder_lr", &TrainConfig::text_encoder_lr, Above{0});
        v("batch_size", &TrainConfig::batch_size, AtLeast{1});
        v("optimizer", &TrainConfig::optimizer,
          OneOf{{"adamw", "adam", "adamw8bit", "prodigy", "prodigyopt"},
                {"adam8bit", "adamw8", "adam8", "ademamix8bit", "lion8bit", "lion", "adagrad",
                 "adafactor", "prodigy8bit", "dadaptation", "dadaptadam", "dadaptlion", "automagic",
                 "automagic2", "automagic3", "automagicexperiment"},
                "loom trains with 32-bit AdamW instead"});
        v("optimizer_params", &TrainConfig::optimizer_params);
        v("lr_scheduler", &TrainConfig::lr_scheduler,
          OneOf{{"constant", "constant_with_warmup", "cosine", "linear"},
                {"cosine_with_restarts", "step", "polynomial"},
                "loom uses a constant learning rate instead"});
        v("lr_scheduler_params", &TrainConfig::lr_scheduler_params);
        v("dtype", &TrainConfig::dtype,
          OneOf{{"fp32", "float", "float32", "single", "bf16", "bfloat16"},
                {"fp16", "half", "float16", "8bit", "e4m3fn", "float8"},
                "loom computes in fp32 instead"});
        v("noise_scheduler", &TrainConfig::noise_scheduler,
          OneOf{{"ddpm", "flowmatch"},
                {"lcm", "custom_lcm", "ddim", "lms", "euler", "euler_a", "pndm", "dpmsolver"},
                "loom trains SD models with the DDPM objective and Flux with flow matching"});
        v("timestep_type", &TrainConfig::timestep_type,
          OneOf{{"sigmoid", "linear", "weighted", "shift", "flux_shift", "lumina2_shift",
                 "lognorm_blend", "next_sample", "one_step", "two_step", "four_step",
                 "eight_step"}});
        v("content_or_style", &TrainConfig::content_or_style,
          OneOf{{"balanced", "content", "style"}});
        v("min_denoising_steps", &TrainConfig::min_denoising_steps, AtLeast{0}, AtMost{999});
        // 1000 is ai-toolkit's natural value: it draws timesteps below it (loom caps at 999).
        v("max_denoising_steps", &TrainConfig::max_denoising_steps, AtLeast{0}, AtMost{1000});
        v("loss_type", &TrainConfig::loss_type,
          OneOf{{"mse", "mae"},
                {"pseudo_huber", "wavelet", "stepped", "mean_flow"},
                "loom uses mse instead"});
        v("max_grad_norm", &TrainConfig::max_grad_norm, AtLeast{0});
        v("gradient_checkpointing", &TrainConfig::gradient_checkpointing);
        v("train_unet", &TrainConfig::train_unet);
        v("train_text_encoder", &TrainConfig::train_text_encoder,
          NotYetUnlessDefault{"the text encoder stays frozen"});
        v("gradient_accumulation", &TrainConfig::gradient_accumulation, AtLeast{1});
        v("gradient_accumulation_steps", &TrainConfig::gradient_accumulation_steps,
          NotYetUnlessDefault{"use gradient_accumulation, which loom implements"});
        v("skip_first_sample", &TrainConfig::skip_first_sample);
        v("force_first_sample", &TrainConfig::force_first_sample);
        v("disable_sampling", &TrainConfig::disable_sampling);
        v("noise_offset", &TrainConfig::noise_offset, AtLeast{0});
        v("ema_config", &TrainConfig::ema_config);
        v("cache_text_embeddings", &TrainConfig::cache_text_embeddings);
        v.not_yet({"refiner_lr",
                   "embedding_lr",
                   "adapter_lr",
                   "num_train_timesteps",
                   "loss_target",
                   "train_refiner",
                   "start_step",
                   "single_item_batching",
                   "unload_text_encoder",
                   "do_paramiter_swapping",
                   "paramiter_swapping_factor",
                   "attention_backend",
                   "xformers",
                   "sdp",
                   "min_snr_gamma",
                   "snr_gamma",
                   "learnable_snr_gos",
                   "linear_timesteps",
                   "linear_timesteps2",
                   "next_sample_timesteps",
                   "noise_multiplier",
                   "target_noise_multiplier",
                   "random_noise_multiplier",
                   "random_noise_shift",
                   "dynamic_noise_offset",
                   "do_signal_correction_noise",
                   "signal_correction_noise_scale",
                   "do_batch_noise_correction",
                   "batch_noise_correction_scale",
                   "do_signal_amplification",
                   "signal_amplification_strength",
                   "img_multiplier",
                   "noisy_latent_multiplier",
                   "latent_multiplier",
                   "match_noise_norm",
                   "correct_pred_norm",
                   "correct_pred_norm_multiplier",
                   "pred_scaler",
                   "t0_loss_target",
                   "t0_velocity_equiv_weight",
                   "do_fft_loss",
                   "do_fft_velocity_equiv_weight",
                   "target_norm_std",
                   "target_norm_std_value",
                   "max_loss",
                   "max_loss_debug",
                   "weight_jitter",
                   "standardize_images",
                   "standardize_latents",
                   "force_consistent_noise",
                   "blended_blur_noise",
                   "optimal_noise_pairing_samples",
                   "diff_output_preservation",
                   "diff_output_preservation_multiplier",
                   "diff_output_preservation_class",
                   "blank_prompt_preservation",
                   "blank_prompt_preservation_multiplier",
                   "inverted_mask_prior",
                   "inverted_mask_prior_multiplier",
                   "reg_weight",
                   "do_prior_divergence",
                   "prompt_dropout_prob",
                   "negative_prompt",
                   "max_negative_prompts",
                   "do_cfg",
                   "do_random_cfg",
                   "cfg_scale",
                   "max_cfg_scale",
                   "cfg_rescale",
                   "bypass_guidance_embedding",
                   "do_guidance_loss",
                   "guidance_loss_target",
                   "guidance_loss_schedule",
                   "do_guidance_loss_cfg_zero",
                   "unconditional_prompt",
                   "do_differential_guidance",
                   "differential_guidance_scale",
                   "do_blank_stabilization",
                   "merge_network_on_save",
                   "merge_network_on_save_strength",
                   "switch_boundary_every",
                   "audio_loss_multiplier",
                   "free_u",
                   "train_turbo",
                   "short_and_long_captions",
                   "match_adapter_chance",
                   "diffusion_feature_extractor_path",
                   "diffusion_feature_extractor_weight",
                   "validation_config"});
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
        v.not_yet({"quantize_kwargs",
                   "layer_offloading",
                   "layer_offloading_transformer_percent",
                   "layer_offloading_text_encoder_percent",
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
                   "assistant_lora_path",
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
                   "model_kwargs",
                   "ignore_if_contains",
                   "only_if_contains",
                   "text_encoder_bits",
                   "use_text_encoder_1",
                   "use_text_encoder_2",
                   "refiner_name_or_path",
                   "refiner_start_at",
                   "in_context",
                   "auto_memory"});
    }
};

// One preview prompt; fields left out inherit from the `sample` section.
struct SampleItem {
    std::string prompt;
    std::optional<int> width;
    std::optional<int> height;
    std::optional<std::string> neg;
    std::optional<std::int64_t> seed;
    std::optional<double> guidance_scale;
    std::optional<int> sample_steps;
    std::optional<double> network_multiplier;
    std::optional<int> num_frames;
    std::optional<int> fps;

    template <class V>
    static void fields(V& v) {
        v("prompt", &SampleItem::prompt, Required{"the text of this preview prompt"});
        v("width", &SampleItem::width, AtLeast{64}, MultipleOf{8});
        v("height", &SampleItem::height, AtLeast{64}, MultipleOf{8});
        v("neg", &SampleItem::neg);
        v("seed", &SampleItem::seed, AtLeast{-1});
        v("guidance_scale", &SampleItem::guidance_scale, AtLeast{0});
        v("sample_steps", &SampleItem::sample_steps, AtLeast{1});
        v("network_multiplier", &SampleItem::network_multiplier);
        v("num_frames", &SampleItem::num_frames, AtLeast{1});
        v("fps", &SampleItem::fps, AtLeast{1});
        v.not_yet(
            {"ctrl_img", "ctrl_idx", "ctrl_img_1", "ctrl_img_2", "ctrl_img_3", "do_cfg_norm"});
    }
};

struct SampleConfig {
    std::string sampler = "ddpm";
    int sample_every = 100;
    int sample_start_step = 0;
    int width = 512;
    int height = 512;
    std::string neg;
    std::int64_t seed = 0;  // -1: a random seed per sample
    bool walk_seed = false;
    double guidance_scale = 7.0;
    int sample_steps = 20;
    double network_multiplier = 1.0;
    double guidance_rescale = 0.0;
    std::string format = "jpg";
    int num_frames = 1;
    int fps = 16;
    std::vector<std::string> prompts;
    std::vector<SampleItem> samples;

    template <class V>
    static void fields(V& v) {
        v("sampler", &SampleConfig::sampler,
          OneOf{{"ddpm", "ddim", "euler", "flowmatch"},
                {"pndm", "lms", "k_lms", "k_euler", "euler_a", "dpmsolver", "dpmsolver++",
                 "k_dpmsolver", "k_dpmsolver++", "dpmsingle", "heun", "dpm_2", "dpm_2_a", "lcm",
                 "custom_lcm", "mean_flow"},
                "loom samples with ddim instead"});
        v("sample_every", &SampleConfig::sample_every, AtLeast{1});
        v("sample_start_step", &SampleConfig::sample_start_step, AtLeast{0});
        v("width", &SampleConfig::width, AtLeast{64}, MultipleOf{8});
        v("height", &SampleConfig::height, AtLeast{64}, MultipleOf{8});
        v("neg", &SampleConfig::neg);
        v("seed", &SampleConfig::seed, AtLeast{-1});
        v("walk_seed", &SampleConfig::walk_seed);
        v("guidance_scale", &SampleConfig::guidance_scale, AtLeast{0});
        v("sample_steps", &SampleConfig::sample_steps, AtLeast{1});
        v("network_multiplier", &SampleConfig::network_multiplier);
        v("guidance_rescale", &SampleConfig::guidance_rescale,
          NotYetUnlessDefault{"guidance is not rescaled"});
        v("format", &SampleConfig::format,
          OneOf{{"jpg", "png"}, {"webp"}, "loom writes png instead"});
        v("num_frames", &SampleConfig::num_frames, AtLeast{1});
        v("fps", &SampleConfig::fps, AtLeast{1});
        v("prompts", &SampleConfig::prompts);
        v("samples", &SampleConfig::samples);
        v.not_yet(
            {"adapter_conditioning_scale", "refiner_start_at", "extra_values", "do_cfg_norm"});
    }
};

struct LoggingConfig {
    int log_every = 100;
    bool verbose = false;
    bool use_wandb = false;
    bool use_ui_logger = false;
    std::string project_name = "ai-toolkit";
    std::optional<std::string> run_name;

    template <class V>
    static void fields(V& v) {
        v("log_every", &LoggingConfig::log_every, AtLeast{1});
        v("verbose", &LoggingConfig::verbose);
        v("use_wandb", &LoggingConfig::use_wandb,
          NotYetUnlessDefault{"metrics go to metrics.jsonl in the run folder"});
        v("use_ui_logger", &LoggingConfig::use_ui_logger,
          NotYetUnlessDefault{"metrics go to metrics.jsonl in the run folder"});
        v("project_name", &LoggingConfig::project_name);
        v("run_name", &LoggingConfig::run_name);
    }
};

// loom's own block: out-of-memory recovery (DESIGN.md "Recovery specification").
struct OomConfig {
    bool enabled = true;
    std::optional<MemorySize> vram_limit;  // cap the device, e.g. 8GiB on a 24 GB card
    bool probe = true;                     // preflight worst-case step before step 1
    int stable_after = 50;                 // steps on one plan before it is recorded as stable
    bool scale_up = false;                 // undo downgrades one at a time once stable
    std::string reuse_stable = "auto";     // start from the store's stable plan: auto | off
    int max_restarts = 3;                  // supervisor restarts after uncatchable deaths
    // Memory knobs of the starting plan that have no ai-toolkit key (`loom stable export`
    // writes them; guard::plan_from_job reads them): buckets above this many pixels inactive,
    // the low-VRAM sub-mode (model.low_vram: true is 1, model.quantize: true is 2), preview
    // batching, and the host RAM knobs.
    std::optional<std::int64_t> max_bucket_pixels;
    int low_vram_level = 0;
    bool sample_batch_prompts = true;
    bool sample_batch_guidance = true;
    bool host_memory_caches = true;
    int host_threads = 0;  // 0: LibTorch's default

    template <class V>
    static void fields(V& v) {
        v("enabled", &OomConfig::enabled);
        v("vram_limit", &OomConfig::vram_limit);
        v("probe", &OomConfig::probe);
        v("stable_after", &OomConfig::stable_after, AtLeast{1});
        v("scale_up", &OomConfig::scale_up);
        v("reuse_stable", &OomConfig::reuse_stable, OneOf{{"auto", "off"}});
        v("max_restarts", &OomConfig::max_restarts, AtLeast{0});
        v("max_bucket_pixels", &OomConfig::max_bucket_pixels, AtLeast{64});
        v("low_vram_level", &OomConfig::low_vram_level, AtLeast{0}, AtMost{3});
        v("sample_batch_prompts", &OomConfig::sample_batch_prompts);
        v("sample_batch_guidance", &OomConfig::sample_batch_guidance);
        v("host_memory_caches", &OomConfig::host_memory_caches);
        v("host_threads", &OomConfig::host_threads, AtLeast{0});
    }
};

// loom's own block: GPU performance switches. Each is off by default so a run can be measured
// with and without it (docs/BENCHMARKS.md); none changes what is computed beyond float rounding,
// and each is tested for equal results on the CPU and sim paths.
struct PerfConfig {
    bool fused_adamw = false;      // AdamW through ATen's fused multi-tensor kernel
    bool channels_last = false;    // UNet and VAE conv activations in channels-last memory format
    bool stream_prefetch = false;  // low_vram level 3: copy the next layers' weights ahead of use
    bool cuda_graphs = false;      // whole-step CUDA graph capture per bucket shape (CUDA only)

    template <class V>
    static void fields(V& v) {
        v("fused_adamw", &PerfConfig::fused_adamw);
        v("channels_last", &PerfConfig::channels_last);
        v("stream_prefetch", &PerfConfig::stream_prefetch);
        v("cuda_graphs", &PerfConfig::cuda_graphs);
    }
};

struct ProcessConfig {
    std::string type;
    std::optional<std::string> name;             // resolved: config.name when absent
    std::optional<std::string> training_folder;  // resolved: config.training_folder; required
    std::string device = "cuda:0";
    std::optional<std::string> trigger_word;
    std::optional<std::int64_t> training_seed;
    int performance_log_every = 0;
    NetworkConfig network;
    SaveConfig save;
    std::vector<DatasetConfig> datasets;
    TrainConfig train;
    ModelConfig model;
    SampleConfig sample;
    LoggingConfig logging;
    OomConfig oom;
    PerfConfig perf;
    // The enumerations above as values, resolved once by the loader; not a YAML key (the YAML
    // keeps the words as written), so neither read, emitted nor compared.
    Choices choices;

    template <class V>
    static void fields(V& v) {
        v("type", &ProcessConfig::type, Required{"sd_trainer or diffusion_trainer"},
          OneOf{{"sd_trainer", "diffusion_trainer"},
                {"textual_inversion_trainer", "ui_trainer", "slider", "concept_slider",
                 "ultimate_slider_trainer", "image_reference_slider_trainer", "concept_replacer",
                 "reference_generator", "pure_lora_generator", "batch_img2img", "dataset_tools",
                 "sync_from_collection", "super_tagger"},
                "loom trains it as an sd_trainer LoRA job, from its datasets"});
        v("name", &ProcessConfig::name);
        v("training_folder", &ProcessConfig::training_folder);
        v("device", &ProcessConfig::device);
        v("trigger_word", &ProcessConfig::trigger_word);
        v("training_seed", &ProcessConfig::training_seed);
        v("performance_log_every", &ProcessConfig::performance_log_every, AtLeast{0});
        v("network", &ProcessConfig::network);
        v("save", &ProcessConfig::save);
        v("datasets", &ProcessConfig::datasets,
          Required{"a list of datasets, each with a folder_path"}, MinItems{1});
        v("train", &ProcessConfig::train);
        v("model", &ProcessConfig::model, Required{"the base model section"});
        v("sample", &ProcessConfig::sample);
        v("logging", &ProcessConfig::logging);
        v("oom", &ProcessConfig::oom);
        v("perf", &ProcessConfig::perf);
        v.not_yet({"log_dir", "first_sample", "sqlite_db_path", "torch_profiler", "guidance",
                   "embedding", "decorator", "adapter", "slider", "do_lorm", "lorm_extract_mode",
                   "lorm_extract_mode_param"});
    }
};

struct JobConfig {
    std::string name;
    std::optional<std::string> training_folder;
    std::vector<ProcessConfig> process;

    template <class V>
    static void fields(V& v) {
        v("name", &JobConfig::name, Required{"the job name; it names the run folder and files"});
        v("training_folder", &JobConfig::training_folder);
        v("process", &JobConfig::process, Required{"a list of training processes"}, MinItems{1});
        // Keys of ai-toolkit's older `job: train` jobs (TrainJob): loom takes the device and
        // the log folder per process.
        v.not_yet({"device", "log_dir"});
    }
};

struct Job {
    std::string job;
    JobConfig config;
    StringMap meta;

    template <class V>
    static void fields(V& v) {
        v("job", &Job::job, Required{"'extension' for a training job"},
          OneOf{{"extension"},
                {"train", "extract", "mod", "generate"},
                "loom runs `job: extension` jobs"});
        v("config", &Job::config, Required{"the job body: name and process list"});
        v("meta", &Job::meta);
    }
};

// Structural equality over every field of the schema.
bool operator==(const Job& a, const Job& b);
inline bool operator!=(const Job& a, const Job& b) {
    return !(a == b);
}

}  // namespace loom::config
