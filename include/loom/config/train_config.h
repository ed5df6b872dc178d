#pragma once

// The process's `train:` section (ai-toolkit.md §1) with its nested blocks: EMA, the optimizer's
// and the LR scheduler's parameters. Keys listed once, in `fields(v)` (config/job.h).

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/config/choices.h"
#include "loom/config/field_rules.h"

namespace loom::config {

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
    // A guidance-distilled Flux transformer (dev, Kontext, Flex.2) trains without its guidance
    // embedding: the timestep and pooled text alone (ai-toolkit's bypass_flux_guidance).
    bool bypass_guidance_embedding = false;
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
    // A model of several experts (Wan 2.2 14B): how many micro-batches of the job's batch size
    // one expert trains before the next takes over (ai-toolkit's SDTrainer counts them the same
    // way; loom counts from the run's first step, so a resumed run keeps the cadence).
    int switch_boundary_every = 1;

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
        v("bypass_guidance_embedding", &TrainConfig::bypass_guidance_embedding);
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
        v("switch_boundary_every", &TrainConfig::switch_boundary_every, AtLeast{1});
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
                   "blank_prompt_preservation",
                   "inverted_mask_prior",
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
                   "audio_loss_multiplier",
                   "free_u",
                   "train_turbo",
                   "short_and_long_captions",
                   "match_adapter_chance",
                   "diffusion_feature_extractor_path",
                   "diffusion_feature_extractor_weight",
                   "validation_config"});
        // The UI writes these with their feature off (diff_output_preservation: false, ...);
        // they tune nothing then.
        v.not_yet(NotYetFeature{
            "diff_output_preservation",
            nullptr,
            {"diff_output_preservation_multiplier", "diff_output_preservation_class"}});
        v.not_yet(NotYetFeature{
            "blank_prompt_preservation", nullptr, {"blank_prompt_preservation_multiplier"}});
        v.not_yet(
            NotYetFeature{"inverted_mask_prior", nullptr, {"inverted_mask_prior_multiplier"}});
    }
};

}  // namespace loom::config
