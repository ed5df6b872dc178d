#pragma once

// Preview sampling (the job's `sample:` block): text-to-image with the model being trained,
// classifier-free guidance, DDIM or Euler steps, decoded by the VAE. The memory knobs the OOM
// ladder turns for sampling are options here: prompts one at a time or together, guidance passes
// batched or sequential, and the image size.

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loom/config/choices.h"
#include "loom/model/sd/stable_diffusion.h"

namespace loom {

struct PreviewRequest {
    std::string prompt;
    std::string negative;
    int64_t seed = 0;
    int64_t width = 512;
    int64_t height = 512;
    int64_t steps = 20;
    double guidance_scale = 7.0;
    int64_t frames = 1;  // a video family's clip length (image families make one image)
    // The control image ([3, height, width] float32 in [-1, 1], at the request's size) a family
    // of an arch with control_images edits (a prompt's --ctrl_img); undefined: none.
    at::Tensor control;
    // The control images an arch whose prompts read them edits (Qwen-Image-Edit: ctrl_img, or
    // Edit-2509's ctrl_img_1 .. ctrl_img_3), uint8 [H, W, 3] on the host at their own sizes: the
    // pipeline resizes them itself. Empty: none.
    std::vector<at::Tensor> control_images;
};

struct PreviewOptions {
    config::PreviewSampler sampler = config::PreviewSampler::kDdim;  // ddpm runs as ddim
    bool batch_prompts = true;   // all prompts in one batch (else one at a time)
    bool batch_guidance = true;  // cond and uncond in one pass (else two passes)
    // T5 / UMT5 tokens per prompt (Flux, Wan); 0: the family's training length (512).
    std::size_t max_sequence_length = 0;
};

// Images as uint8 [H, W, 3] CPU tensors, one per request, in request order. The same request
// and seed give the same image whatever the batching options (each image's noise comes from its
// own seeded generator).
// The batches the requests are sampled in: each group shares the size, steps and guidance
// (one request a group unless `batch_prompts`), in request order.
std::vector<std::vector<std::size_t>> preview_groups(const std::vector<PreviewRequest>& requests,
                                                     bool batch_prompts);

// Decoded images [B, 3, H, W] in about [-1, 1] as uint8 [H, W, 3] CPU tensors.
std::vector<at::Tensor> to_rgb8(const at::Tensor& images);

// A family's sampler for one group of requests: the group's prompts, their negative prompts and
// their noise ([B, ...] on the device) with the group's first request (its size, steps and
// guidance are the group's) -> the decoded images [B, 3, H, W] in about [-1, 1].
using GroupSampler = std::function<at::Tensor(
    const std::vector<std::string>& prompts, const std::vector<std::string>& negatives,
    const at::Tensor& noise, const PreviewRequest& first)>;
// The previews of a family whose requests differ only in prompt, negative prompt and seed
// (Chroma, Z-Image, Qwen-Image): each group's noise from `initial_noise` (one request's, on the
// CPU), sampled by `sample`, as uint8 [H, W, 3] CPU tensors in request order.
std::vector<at::Tensor> sample_in_groups(
    const std::vector<PreviewRequest>& requests, const PreviewOptions& options,
    const at::Device& device, const std::function<at::Tensor(const PreviewRequest&)>& initial_noise,
    const GroupSampler& sample);

std::vector<at::Tensor> generate_previews(StableDiffusion& model,
                                          const std::vector<PreviewRequest>& requests,
                                          const PreviewOptions& options, const at::Device& device);

}  // namespace loom
