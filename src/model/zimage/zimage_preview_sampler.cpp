#include "loom/model/zimage/zimage_preview_sampler.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>

#include "loom/core/error.h"
#include "loom/model/flux/flux_preview_sampler.h"
#include "loom/model/schedules/flow_match.h"

namespace loom {

namespace {

// One text side of a step: the embeddings at the transformer's dtype and their lengths.
struct ZImageText {
    at::Tensor context;
    std::vector<int64_t> lengths;
};

ZImageText zimage_text(ZImageModel& model, const std::vector<std::string>& prompts,
                       std::size_t max_sequence_length, const at::Device& device,
                       at::ScalarType dtype) {
    const TextConditioning c = model.encode_prompts(prompts, max_sequence_length);
    return {c.context.to(device).to(dtype), zimage_caption_lengths(c.context_mask)};
}

}  // namespace

at::Tensor zimage_sample(ZImageModel& model, const std::vector<std::string>& prompts,
                         const std::vector<std::string>& negatives, const at::Tensor& noise,
                         int64_t steps, double guidance, std::size_t max_sequence_length,
                         bool batch_guidance) {
    if (!model.vae || !model.text_encoder) {
        throw Error("Z-Image sampling needs the VAE and the text encoder loaded");
    }
    // The pipeline's guidance: ai-toolkit's less one; a pass on the negatives when above 0.
    const double scale = std::max(0.0, guidance - 1.0);
    const bool guided = scale > 0;
    if (guided && negatives.size() != prompts.size()) {
        throw Error("Z-Image sampling: one negative prompt per prompt");
    }
    torch::NoGradGuard no_grad;
    ZImageTransformer2DModelImpl& transformer = *model.transformer;
    const at::ScalarType dtype = transformer.parameters().front().scalar_type();
    const at::Device device = transformer.parameters().front().device();
    const int64_t batch = noise.size(0);
    const int64_t height = noise.size(2);
    const int64_t width = noise.size(3);

    at::Tensor latents = noise.to(device);
    const ZImageText text = zimage_text(model, prompts, max_sequence_length, device, dtype);
    const ZImageText negative =
        guided ? zimage_text(model, negatives, max_sequence_length, device, dtype) : ZImageText{};
    const FlowMatchEulerSampler sampler(model.scheduler, steps, (height / 2) * (width / 2));
    for (int64_t i = 0; i < sampler.steps(); ++i) {
        ZImageInputs in;
        in.latents = latents.to(dtype);
        in.timestep = ((1000 - sampler.timesteps()[i].expand({batch})) / 1000).to(device);
        in.captions = text.context;
        in.caption_lengths = text.lengths;
        at::Tensor prediction;
        if (guided) {
            at::Tensor pos;
            at::Tensor neg;
            if (batch_guidance) {
                ZImageInputs both = in;
                both.latents = at::cat({in.latents, in.latents});
                both.timestep = at::cat({in.timestep, in.timestep});
                both.captions = at::cat({text.context, negative.context});
                both.caption_lengths = text.lengths;
                both.caption_lengths.insert(both.caption_lengths.end(), negative.lengths.begin(),
                                            negative.lengths.end());
                const auto halves = transformer.forward(both).to(at::kFloat).chunk(2);
                pos = halves[0];
                neg = halves[1];
            } else {
                pos = transformer.forward(in).to(at::kFloat);
                in.captions = negative.context;
                in.caption_lengths = negative.lengths;
                neg = transformer.forward(in).to(at::kFloat);
            }
            prediction = pos + scale * (pos - neg);
        } else {
            prediction = transformer.forward(in).to(at::kFloat);
        }
        latents = sampler.step(-prediction, i, latents);
    }
    const VAEConfig& vc = model.vae->config();
    at::Tensor z = latents / vc.scaling_factor;
    if (vc.shift_factor) z = z + *vc.shift_factor;
    return model.vae->decode(z.to(model.vae->parameters().front().scalar_type())).to(at::kFloat);
}

std::vector<at::Tensor> generate_zimage_previews(ZImageModel& model,
                                                 const std::vector<PreviewRequest>& requests,
                                                 const PreviewOptions& options,
                                                 const at::Device& device,
                                                 std::size_t max_sequence_length) {
    return sample_in_groups(
        requests, options, device,
        [&](const PreviewRequest& r) {
            return flux_initial_noise(model.vae, r.seed, r.width, r.height);
        },
        [&](const std::vector<std::string>& prompts, const std::vector<std::string>& negatives,
            const at::Tensor& noise, const PreviewRequest& first) {
            return zimage_sample(model, prompts, negatives, noise, first.steps,
                                 first.guidance_scale, max_sequence_length, options.batch_guidance);
        });
}

}  // namespace loom
