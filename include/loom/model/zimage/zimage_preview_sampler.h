#pragma once

// Z-Image previews: ZImagePipeline's loop — the flow-matching Euler steps over
// linspace(1, 1/steps) sigmas with the scheduler's shift, the transformer fed (1000 - t) / 1000
// and its output negated, and, with guidance, a pass on the negative prompt combined as
// pos + g (pos - neg) — decoded by Flux's VAE. The guidance scale is ai-toolkit's, which it
// lowers by one before calling the pipeline (z_image.py generate_single_image: "CFG is 0
// normalized for this model"): 1 is one pass, 4 is the pipeline's 3. A request's noise comes
// from a CPU generator seeded with its seed, as diffusers draws it.
//
// ref: diffusers pipelines/z_image/pipeline_z_image.py::ZImagePipeline.__call__

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <string>
#include <vector>

#include "loom/model/preview_sampler.h"
#include "loom/model/zimage/zimage_model.h"

namespace loom {

// Denoises `noise` ([B, 16, h, w] latents, float32) for `prompts` (and, with `guidance` above
// 1, against `negatives`, one per prompt) in `steps` steps and decodes it: images
// [B, 3, 8h, 8w] in about [-1, 1]. With `batch_guidance` the two passes are one call on the
// doubled batch (the pipeline's own way); otherwise two calls: the same images, a smaller peak.
at::Tensor zimage_sample(ZImageModel& model, const std::vector<std::string>& prompts,
                         const std::vector<std::string>& negatives, const at::Tensor& noise,
                         int64_t steps, double guidance, std::size_t max_sequence_length,
                         bool batch_guidance = true);

// Images as uint8 [H, W, 3] CPU tensors, one per request, in request order; requests of one size,
// step count and guidance share a batch with `options.batch_prompts`. options.sampler is not
// used (always the flow-matching Euler sampler).
std::vector<at::Tensor> generate_zimage_previews(ZImageModel& model,
                                                 const std::vector<PreviewRequest>& requests,
                                                 const PreviewOptions& options,
                                                 const at::Device& device,
                                                 std::size_t max_sequence_length);

}  // namespace loom
