#pragma once

// Qwen-Image previews: QwenImagePipeline's loop — the flow-matching Euler steps over linspace
// sigmas with the exponential dynamic shift and the terminal stretch, the transformer fed t / 1000
// under each prompt's text mask, and, with a guidance scale above 1, a pass on the negative
// prompt combined as neg + g (cond - neg) and rescaled per token to the conditional prediction's
// norm ("true CFG": ai-toolkit passes its guidance_scale as true_cfg_scale) — decoded by the Wan
// VAE after the per-channel denormalisation. A request's noise is drawn from a CPU generator
// seeded with its seed, [1, 1, 16, h, w] as the pipeline draws it, so loom and diffusers give the
// same image for a seed.
//
// The Edit pipelines' loop adds the control images: in the prompts' encoding
// (QwenImageModel::encode_edit_prompts) and as latents after the image's on the sequence (each
// resized to about a megapixel at its own aspect, the VAE's mean, normalised and packed), the
// prediction cut back to the image's tokens, the dynamic shift still counting the image's alone.
//
// ref: diffusers pipelines/qwenimage/pipeline_qwenimage.py::QwenImagePipeline.__call__;
//      pipeline_qwenimage_edit.py::QwenImageEditPipeline.__call__;
//      pipeline_qwenimage_edit_plus.py::QwenImageEditPlusPipeline.__call__

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <string>
#include <vector>

#include "loom/model/preview_sampler.h"
#include "loom/model/qwenimage/qwenimage_model.h"

namespace loom {

// The latent noise of a width x height image from `seed`: [1, z_dim, h, w] float32 on the CPU,
// h and w as the pipeline rounds them (2 * (pixels / 16)).
at::Tensor qwenimage_initial_noise(const QwenImageModel& model, int64_t seed, int64_t width,
                                   int64_t height);

// Denoises `noise` ([B, 16, h, w] latents, float32) for `prompts` (against `negatives` with
// `guidance` above 1) in `steps` steps and decodes it: images [B, 3, 8h, 8w] in about [-1, 1].
// With `batch_guidance` the two passes are one call on the doubled batch; the same images. An
// Edit model edits `controls` (uint8 [H, W, 3] host images at their own sizes, the same for
// every prompt: one for Edit, one to three for Edit-2509); Qwen-Image takes none.
at::Tensor qwenimage_sample(QwenImageModel& model, const std::vector<std::string>& prompts,
                            const std::vector<std::string>& negatives, const at::Tensor& noise,
                            int64_t steps, double guidance, std::size_t max_sequence_length,
                            bool batch_guidance = false,
                            const std::vector<at::Tensor>& controls = {});

// Images as uint8 [H, W, 3] CPU tensors, one per request, in request order.
std::vector<at::Tensor> generate_qwenimage_previews(QwenImageModel& model,
                                                    const std::vector<PreviewRequest>& requests,
                                                    const PreviewOptions& options,
                                                    const at::Device& device,
                                                    std::size_t max_sequence_length);

}  // namespace loom
