#include "loom/model/chroma/chroma_preview_sampler.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "loom/core/error.h"
#include "loom/model/flux/flux_preview_sampler.h"
#include "loom/model/schedules/flow_match.h"

namespace loom {

namespace {

// One text side of a step: the embeddings at the transformer's dtype and the joint mask.
struct ChromaText {
    at::Tensor context;
    at::Tensor mask;
};

ChromaText chroma_text(ChromaModel& model, const std::vector<std::string>& prompts,
                       std::size_t max_sequence_length, int64_t image_tokens,
                       const at::Device& device, at::ScalarType dtype) {
    const TextConditioning c = model.encode_prompts(prompts, max_sequence_length);
    return {c.context.to(device).to(dtype),
            chroma_joint_mask(c.context_mask, image_tokens).to(device).to(dtype)};
}

}  // namespace

at::Tensor chroma_sample(ChromaModel& model, const std::vector<std::string>& prompts,
                         const std::vector<std::string>& negatives, const at::Tensor& noise,
                         int64_t steps, double guidance, std::size_t max_sequence_length,
                         bool batch_guidance) {
    if (!model.vae || !model.text_encoder) {
        throw Error("Chroma sampling needs the VAE and the text encoder loaded");
    }
    // ChromaPipeline.do_classifier_free_guidance: a scale above 1.
    const bool guided = guidance > 1.0;
    if (guided && negatives.size() != prompts.size()) {
        throw Error("Chroma sampling: one negative prompt per prompt");
    }
    torch::NoGradGuard no_grad;
    ChromaTransformer2DModelImpl& transformer = *model.transformer;
    const at::ScalarType dtype = transformer.parameters().front().scalar_type();
    const at::Device device = transformer.parameters().front().device();
    const int64_t batch = noise.size(0);
    const int64_t height = noise.size(2);
    const int64_t width = noise.size(3);

    at::Tensor latents = flux_pack_latents(noise.to(device));
    const int64_t image_tokens = latents.size(1);
    const ChromaText text =
        chroma_text(model, prompts, max_sequence_length, image_tokens, device, dtype);
    const ChromaText negative =
        guided ? chroma_text(model, negatives, max_sequence_length, image_tokens, device, dtype)
               : ChromaText{};
    ChromaInputs in;
    in.img_ids = flux_image_ids(height, width, at::TensorOptions().device(device));
    in.txt_ids = flux_text_ids(text.context.size(1), at::TensorOptions().device(device));
    const FlowMatchEulerSampler sampler(model.scheduler, steps, image_tokens);
    for (int64_t i = 0; i < sampler.steps(); ++i) {
        // The pipeline passes timestep / 1000, rounding as float32 does.
        in.timestep = (sampler.timesteps()[i].expand({batch}) / 1000).to(device);
        in.hidden_states = latents.to(dtype);
        in.encoder_hidden_states = text.context;
        in.attention_mask = text.mask;
        at::Tensor velocity;
        if (guided && batch_guidance) {
            ChromaInputs both = in;
            both.hidden_states = at::cat({in.hidden_states, in.hidden_states});
            both.timestep = at::cat({in.timestep, in.timestep});
            both.encoder_hidden_states = at::cat({text.context, negative.context});
            both.attention_mask = at::cat({text.mask, negative.mask});
            const auto halves = transformer.forward(both).chunk(2);
            velocity = halves[1] + guidance * (halves[0] - halves[1]);
        } else {
            velocity = transformer.forward(in);
            if (guided) {
                in.encoder_hidden_states = negative.context;
                in.attention_mask = negative.mask;
                const at::Tensor uncond = transformer.forward(in);
                velocity = uncond + guidance * (velocity - uncond);
            }
        }
        latents = sampler.step(velocity.to(at::kFloat), i, latents);
    }
    return flux_decode_latents(model.vae, latents, height, width);
}

std::vector<at::Tensor> generate_chroma_previews(ChromaModel& model,
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
            return chroma_sample(model, prompts, negatives, noise, first.steps,
                                 first.guidance_scale, max_sequence_length, options.batch_guidance);
        });
}

}  // namespace loom
