#include "loom/model/qwenimage/qwenimage_preview_sampler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>

#include "loom/core/error.h"
#include "loom/device/host_memory.h"
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
                             const std::vector<at::Tensor>& controls,
                             std::size_t max_sequence_length, const at::Device& device,
                             at::ScalarType dtype) {
    const TextConditioning c =
        controls.empty() ? model.encode_prompts(prompts, max_sequence_length)
                         : model.encode_edit_prompts(prompts, std::vector<std::vector<at::Tensor>>(
                                                                  prompts.size(), controls));
    return {c.context.to(device).to(dtype), c.context_mask.to(device)};
}

// The Edit pipelines' image latents: each control image resized (Lanczos) to about a megapixel
// at its own aspect, encoded by the VAE (its mean), normalised per channel and packed, side by
// side on the sequence; `grids` gets each one's packed (height, width).
at::Tensor control_latents(QwenImageModel& model, const std::vector<at::Tensor>& controls,
                           int64_t batch, std::vector<std::pair<int64_t, int64_t>>& grids) {
    std::vector<at::Tensor> packed;
    const at::ScalarType vae_dtype = model.vae->parameters().front().scalar_type();
    const at::Device device = model.vae->parameters().front().device();
    for (const at::Tensor& image : controls) {
        at::Tensor pixels;
        {
            HostAllocations host;  // the resize is the pipeline's host work (PIL)
            pixels = qwen_edit_vae_pixels(image).unsqueeze(0).unsqueeze(2);
        }
        const at::Tensor z = model.vae->encode(pixels.to(device, vae_dtype)).mean;
        const at::Tensor latents = model.vae->normalize_latents(z).select(2, 0).to(at::kFloat);
        grids.emplace_back(latents.size(2) / 2, latents.size(3) / 2);
        packed.push_back(flux_pack_latents(latents).expand({batch, -1, -1}));
    }
    return at::cat(packed, 1);
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
                            bool batch_guidance, const std::vector<at::Tensor>& controls) {
    if (!model.vae || !model.text_encoder) {
        throw Error("Qwen-Image sampling needs the VAE and the text encoder loaded");
    }
    if ((model.variant != QwenImageVariant::kQwenImage) != !controls.empty()) {
        throw Error(controls.empty() ? "Qwen-Image-Edit samples an edit of a control image: give "
                                       "the prompt a ctrl_img"
                                     : "Qwen-Image samples without control images");
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
    QwenImageText text =
        qwenimage_text(model, prompts, controls, max_sequence_length, device, dtype);
    QwenImageText negative =
        guided ? qwenimage_text(model, negatives, controls, max_sequence_length, device, dtype)
               : QwenImageText{};
    QwenImageInputs in;
    in.height = height / 2;
    in.width = width / 2;
    // The controls' latents ride after the image's on the sequence; the prediction is cut back.
    const at::Tensor image_latents =
        controls.empty() ? at::Tensor()
                         : control_latents(model, controls, batch, in.control_grids).to(device);
    const int64_t tokens = in.height * in.width;
    const auto predict = [&](const QwenImageInputs& x) {
        return transformer.forward(x).narrow(1, 0, tokens).to(at::kFloat);
    };
    // The dynamic shift counts the image's tokens alone.
    const FlowMatchEulerSampler sampler(model.scheduler, steps, tokens);
    for (int64_t i = 0; i < sampler.steps(); ++i) {
        in.hidden_states = image_latents.defined() ? at::cat({latents, image_latents}, 1).to(dtype)
                                                   : latents.to(dtype);
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
                const auto halves = predict(both).chunk(2);
                cond = halves[0];
                neg = halves[1];
            } else {
                cond = predict(in);
                QwenImageInputs negated = in;
                negated.encoder_hidden_states = negative.context;
                negated.encoder_hidden_states_mask = negative.mask;
                neg = predict(negated);
            }
            const at::Tensor combined = neg + guidance * (cond - neg);
            // Rescaled per token to the conditional prediction's norm.
            prediction = combined * (at::linalg_vector_norm(cond, 2, {-1}, true) /
                                     at::linalg_vector_norm(combined, 2, {-1}, true));
        } else {
            prediction = predict(in);
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
    // An Edit request's controls are its own: one request a batch, as the Edit pipelines take.
    const bool edit = model.variant != QwenImageVariant::kQwenImage;
    PreviewOptions grouping = options;
    if (edit) grouping.batch_prompts = false;
    return sample_in_groups(
        requests, grouping, device,
        [&](const PreviewRequest& r) {
            return qwenimage_initial_noise(model, r.seed, r.width, r.height);
        },
        [&](const std::vector<std::string>& prompts, const std::vector<std::string>& negatives,
            const at::Tensor& noise, const PreviewRequest& first) {
            return qwenimage_sample(model, prompts, negatives, noise, first.steps,
                                    first.guidance_scale, max_sequence_length,
                                    options.batch_guidance,
                                    edit ? first.control_images : std::vector<at::Tensor>{});
        });
}

}  // namespace loom
