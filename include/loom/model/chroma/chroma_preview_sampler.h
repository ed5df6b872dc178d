#pragma once

// Chroma previews: ChromaPipeline's loop — Flux's flow-matching Euler steps with the
// resolution-dependent shift, the transformer under the prompt's attention mask, and a real
// classifier-free pass (Chroma is not guidance-distilled) on the negative prompt's embeddings
// and mask when the guidance scale is above 1 — decoded by Flux's VAE. A request's noise comes
// from a CPU generator seeded with its seed, as diffusers draws it, so loom and diffusers give
// the same image for a seed.
//
// ref: diffusers pipelines/chroma/pipeline_chroma.py::ChromaPipeline.__call__

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <string>
#include <vector>

#include "loom/model/chroma/chroma_model.h"
#include "loom/model/preview_sampler.h"

namespace loom {

// Denoises `noise` ([B, 16, h, w] latents, float32) for `prompts` (and, with `guidance` above 1,
// against `negatives`, one per prompt) in `steps` steps and decodes it: images [B, 3, 8h, 8w] in
// about [-1, 1]. T5 reads `max_sequence_length` tokens. The conditional and unconditional
// passes are two transformer calls, as ChromaPipeline makes them, or with `batch_guidance` one
// call on the doubled batch (each half with its own text mask): the same images, a larger peak.
at::Tensor chroma_sample(ChromaModel& model, const std::vector<std::string>& prompts,
                         const std::vector<std::string>& negatives, const at::Tensor& noise,
                         int64_t steps, double guidance, std::size_t max_sequence_length,
                         bool batch_guidance = false);

// Images as uint8 [H, W, 3] CPU tensors, one per request, in request order; requests of one size,
// step count and guidance share a batch with `options.batch_prompts`, the guided and unguided
// passes one with `options.batch_guidance`. options.sampler is not used (always the
// flow-matching Euler sampler).
std::vector<at::Tensor> generate_chroma_previews(ChromaModel& model,
                                                 const std::vector<PreviewRequest>& requests,
                                                 const PreviewOptions& options,
                                                 const at::Device& device,
                                                 std::size_t max_sequence_length);

}  // namespace loom
