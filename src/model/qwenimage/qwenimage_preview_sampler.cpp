#include "loom/model/qwenimage/qwenimage_preview_sampler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>

#include "loom/core/error.h"
#include "loom/model/flux/flux_transformer.h"
#include "loom/model/schedules/flow_match.h"

namespace loom {

namespace {

// One text side of a step: the embeddings at the transformer's dtype and their mask.
struct QwenImageText {
    at::Tensor context;
    at::Tensor mask;
};

QwenImageText qwenimage_text(QwenImageModel& model, const std::vector<std::string>& prompts,
                             std::size_t max_sequence_length, const at::Device& device,
                             at::ScalarType dtype) {
    const TextConditioning c = model.encode_prompts(prompts, max_sequence_length);
    return {c.context.to(device).to(dtype), c.context_mask.to(device)};
}

// A text side padded with zero rows (and a zero mask) to `tokens` tokens: the conditional and
// negative prompts of one doubled batch need one length.
QwenImageText padded_to(const QwenImageText& t, int64_t tokens) {
    const int64_t more = tokens - t.context.size(1);
    if (more == 0) return t;
    return {
        at::cat({t.context, t.context.new_zeros({t.context.size(0), more, t.context.size(2)})}, 1),
        at::cat({t.mask, t.mask.new_zeros({t.mask.size(0), more})}, 1)};
}

}  // namespace

at::Tensor qwenimage_initial_noise(const QwenImageModel& model, int64_t seed, int64_t width,
                                   int64_t height) {
    const int64_t factor = model.vae->config().spatial_compression();
    at::Generator gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
    return at::randn(
        {1, model.vae->config().z_dim, 2 * (height / (factor * 2)), 2 * (width / (factor * 2))},
        gen, at::TensorOptions().dtype(at::kFloat));
}

at::Tensor qwenimage_sample(QwenImageModel& model, const std::vector<std::string>& prompts,
                            const std::vector<std::string>& negatives, const at::Tensor& noise,
                            int64_t steps, double guidance, std::size_t max_sequence_length,
                            bool batch_guidance) {
    if (!model.vae || !model.text_encoder) {
        throw Error("Qwen-Image sampling needs the VAE and the text encoder loaded");
    }
    const bool guided = guidance > 1.0;
    if (guided && negatives.size() != prompts.size()) {
        throw Error("Qwen-Image sampling: one negative prompt per prompt");
    }
    torch::NoGradGuard no_grad;
    QwenImageTransformer2DModelImpl& transformer = *model.transformer;
    const at::ScalarType dtype = transformer.parameters().front().scalar_type();
    const at::Device device = transformer.parameters().front().device();
    const int64_t batch = noise.size(0);
    const int64_t height = noise.size(2);
    const int64_t width = noise.size(3);

    at::Tensor latents = flux_pack_latents(noise.to(device));
    QwenImageText text = qwenimage_text(model, prompts, max_sequence_length, device, dtype);
    QwenImageText negative =
        guided ? qwenimage_text(model, negatives, max_sequence_length, device, dtype)
               : QwenImageText{};
    QwenImageInputs in;
    in.height = height / 2;
    in.width = width / 2;
    const FlowMatchEulerSampler sampler(model.scheduler, steps, in.height * in.width);
    for (int64_t i = 0; i < sampler.steps(); ++i) {
        in.hidden_states = latents.to(dtype);
        in.timestep = (sampler.timesteps()[i].expand({batch}) / 1000).to(device);
        in.encoder_hidden_states = text.context;
        in.encoder_hidden_states_mask = text.mask;
        at::Tensor prediction;
        if (guided) {
            at::Tensor cond;
            at::Tensor neg;
            if (batch_guidance) {
                const int64_t tokens = std::max(text.context.size(1), negative.context.size(1));
                const QwenImageText a = padded_to(text, tokens);
                const QwenImageText b = padded_to(negative, tokens);
                QwenImageInputs both = in;
                both.hidden_states = at::cat({in.hidden_states, in.hidden_states});
                both.timestep = at::cat({in.timestep, in.timestep});
                both.encoder_hidden_states = at::cat({a.context, b.context});
                both.encoder_hidden_states_mask = at::cat({a.mask, b.mask});
                const auto halves = transformer.forward(both).to(at::kFloat).chunk(2);
                cond = halves[0];
                neg = halves[1];
            } else {
                cond = transformer.forward(in).to(at::kFloat);
                in.encoder_hidden_states = negative.context;
                in.encoder_hidden_states_mask = negative.mask;
                neg = transformer.forward(in).to(at::kFloat);
            }
            const at::Tensor combined = neg + guidance * (cond - neg);
            // Rescaled per token to the conditional prediction's norm.
            prediction = combined * (at::linalg_vector_norm(cond, 2, {-1}, true) /
                                     at::linalg_vector_norm(combined, 2, {-1}, true));
        } else {
            prediction = transformer.forward(in).to(at::kFloat);
        }
        latents = sampler.step(prediction, i, latents);
    }
    // Unpacked to a one-frame clip, denormalised per channel, decoded, its frame taken.
    const at::Tensor z = flux_unpack_latents(latents, height, width).unsqueeze(2);
    const at::Tensor pixels = model.vae->decode(
        model.vae->denormalize_latents(z).to(model.vae->parameters().front().scalar_type()));
    return pixels.select(2, 0).to(at::kFloat);
}

std::vector<at::Tensor> generate_qwenimage_previews(QwenImageModel& model,
                                                    const std::vector<PreviewRequest>& requests,
                                                    const PreviewOptions& options,
                                                    const at::Device& device,
                                                    std::size_t max_sequence_length) {
    return sample_in_groups(
        requests, options, device,
        [&](const PreviewRequest& r) {
            return qwenimage_initial_noise(model, r.seed, r.width, r.height);
        },
        [&](const std::vector<std::string>& prompts, const std::vector<std::string>& negatives,
            const at::Tensor& noise, const PreviewRequest& first) {
            return qwenimage_sample(model, prompts, negatives, noise, first.steps,
                                    first.guidance_scale, max_sequence_length,
                                    options.batch_guidance);
        });
}

}  // namespace loom
