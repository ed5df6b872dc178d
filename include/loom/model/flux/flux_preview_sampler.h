#pragma once

// Flux previews: the FluxPipeline's text-to-image loop (flow-matching Euler steps with the
// resolution-dependent shift, the guidance embedding for dev, no classifier-free pass, as
// ai-toolkit samples Flux), decoded by the 16-channel VAE. A request's noise comes from a CPU
// generator seeded with its seed, exactly as diffusers draws it with
// torch.Generator().manual_seed(seed), so loom and diffusers give the same image for a seed.
//
// ref: diffusers pipelines/flux/pipeline_flux.py::FluxPipeline.__call__
//      diffusers pipelines/flux/pipeline_flux_kontext.py::FluxKontextPipeline.__call__

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <string>
#include <vector>

#include "loom/model/flux/flux_model.h"
#include "loom/model/preview_sampler.h"

namespace loom {

// Denoises `noise` ([B, 16, h, w] latents, float32) for `prompts` in `steps` steps and decodes
// it: images [B, 3, 8h, 8w] (the VAE's factor) in about [-1, 1]. `guidance` is the distilled
// guidance scale (ignored by schnell); T5 reads `max_sequence_length` tokens. `control`, when
// defined, is Kontext's control image per prompt ([B, 3, H, W] in [-1, 1]), encoded and joined
// on the sequence as FluxKontextPipeline does; for Flex.2 it is encoded into the control
// channels (flux/flex2_channels.h), which are zeros without one, as Flex2Pipeline does.
at::Tensor flux_sample(FluxModel& model, const std::vector<std::string>& prompts,
                       const at::Tensor& noise, int64_t steps, double guidance,
                       std::size_t max_sequence_length, const at::Tensor& control = {});

// The latent noise of a width x height image from `seed`: [1, 16, h, w] float32 on the CPU, h
// and w as the pipeline rounds them (2 * (pixels / (2 * vae factor))).
at::Tensor flux_initial_noise(const FluxModel& model, int64_t seed, int64_t width, int64_t height);
// The same for any pipeline on Flux's VAE and packing (Chroma).
at::Tensor flux_initial_noise(const AutoencoderKL& vae, int64_t seed, int64_t width,
                              int64_t height);

// Packed latents [B, tokens, 64] of a [B, 16, height, width] latent image, unscaled and decoded
// by `vae`, as FluxPipeline ends: images [B, 3, 8 height, 8 width] float32 in about [-1, 1].
at::Tensor flux_decode_latents(AutoencoderKL& vae, const at::Tensor& packed, int64_t height,
                               int64_t width);

// Images as uint8 [H, W, 3] CPU tensors, one per request, in request order; requests of one size,
// step count and guidance share a batch with `options.batch_prompts`. Negative prompts are not
// used (Flux.1 has no classifier-free pass); options.sampler is not either (always the
// flow-matching Euler sampler).
std::vector<at::Tensor> generate_flux_previews(FluxModel& model,
                                               const std::vector<PreviewRequest>& requests,
                                               const PreviewOptions& options,
                                               const at::Device& device,
                                               std::size_t max_sequence_length);

}  // namespace loom
