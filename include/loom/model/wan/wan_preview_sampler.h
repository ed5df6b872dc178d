#pragma once

// Wan previews: WanPipeline's text-to-video loop as ai-toolkit samples Wan (the flow-matching
// Euler scheduler with shift 3 at its own timestep spacing instead of the folder's UniPC;
// classifier-free guidance in two passes when guidance_scale > 1, the negative prompt "" by
// default), decoded by the video VAE after undoing the latents' normalisation. A request's noise
// comes from a CPU generator seeded with its seed, as diffusers draws it with
// torch.Generator().manual_seed(seed).
//
// ref: diffusers pipelines/wan/pipeline_wan.py::WanPipeline.{__call__, prepare_latents};
//      ai-toolkit toolkit/models/wan21/wan21.py::Wan21.get_generation_pipeline

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "loom/model/preview_sampler.h"
#include "loom/model/wan/wan_model.h"

namespace loom {

// The transformer that denoises at sampling timestep t (0..1000): Wan 2.1 has one; Wan 2.2 14B
// the high-noise expert at and above its boundary, the low-noise one below (WanPipeline's
// boundary_ratio). Empty: the model's own transformer.
using WanDenoiserAt = std::function<WanTransformer3DModelImpl&(double t)>;

// Denoises `noise` ([B, C, F, h, w] latents, float32) for `prompts` in `steps` steps and decodes
// it: clips [B, 3, 1 + 4 (F - 1), 8h, 8w] in [-1, 1]; each step runs the transformer
// `denoiser_at` names for its timestep, on that transformer's device. With guidance > 1 each step
// also predicts for `negatives` (one per prompt) and mixes uncond + guidance (cond - uncond).
at::Tensor wan_sample(WanModel& model, const std::vector<std::string>& prompts,
                      const std::vector<std::string>& negatives, const at::Tensor& noise,
                      int64_t steps, double guidance, std::size_t max_sequence_length,
                      const WanDenoiserAt& denoiser_at = {});

// The latent noise of a `frames`-frame width x height clip from `seed`: [1, C, 1 + (frames - 1)
// / 4, height / 8, width / 8] float32 on the CPU, as prepare_latents shapes it.
at::Tensor wan_initial_noise(const WanModel& model, int64_t seed, int64_t width, int64_t height,
                             int64_t frames);

// A clip length as WanPipeline rounds it: 1 + a multiple of the VAE's temporal compression
// (40 -> 41 with 4; 1 + 4k stays).
int64_t wan_pipeline_frames(int64_t frames, int64_t temporal_compression);

// Each request's clip of request.frames frames (rounded by wan_pipeline_frames) on the CPU in
// request order: uint8 [H, W, 3] for one frame, [F, H, W, 3] for more. Requests of one size,
// frame count, step count and guidance share a batch with options.batch_prompts.
std::vector<at::Tensor> generate_wan_previews(WanModel& model,
                                              const std::vector<PreviewRequest>& requests,
                                              const PreviewOptions& options,
                                              const at::Device& device,
                                              std::size_t max_sequence_length,
                                              const WanDenoiserAt& denoiser_at = {});

}  // namespace loom
