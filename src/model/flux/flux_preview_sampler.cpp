#include "loom/model/flux/flux_preview_sampler.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "loom/core/error.h"
#include "loom/model/flux/flex2_channels.h"
#include "loom/model/schedules/flow_match.h"

namespace loom {

at::Tensor flux_sample(FluxModel& model, const std::vector<std::string>& prompts,
                       const at::Tensor& noise, int64_t steps, double guidance,
                       std::size_t max_sequence_length, const at::Tensor& control) {
    if (!model.vae || !model.text_encoder || !model.text_encoder_2) {
        throw Error("Flux sampling needs the VAE and both text encoders loaded");
    }
    torch::NoGradGuard no_grad;
    FluxTransformer2DModelImpl& transformer = *model.transformer;
    const at::ScalarType dtype = transformer.parameters().front().scalar_type();
    const at::Device device = transformer.parameters().front().device();
    const int64_t batch = noise.size(0);
    const int64_t height = noise.size(2);
    const int64_t width = noise.size(3);

    const TextConditioning text = model.encode_prompts(prompts, max_sequence_length);
    at::Tensor latents = flux_pack_latents(noise.to(device));
    FluxInputs in;
    in.encoder_hidden_states = text.context.to(device).to(dtype);
    in.pooled_projections = text.text_embeds.to(device).to(dtype);
    in.img_ids = flux_image_ids(height, width, at::TensorOptions().device(device));
    in.txt_ids =
        flux_text_ids(in.encoder_hidden_states.size(1), at::TensorOptions().device(device));
    if (model.guidance_distilled()) {
        in.guidance = at::full({batch}, guidance, at::TensorOptions().device(device));
    }
    const VAEConfig& vc = model.vae->config();
    at::Tensor control_tokens;  // Kontext: joined on the sequence
    at::Tensor channel_tokens;  // Flex.2: beside the latents on each token
    if (model.flex2()) {
        // The no-inpaint input and the control image's latents (the distribution's mode, where
        // Flex2Pipeline draws a sample), or zeros: packed once, the latents' slots left out.
        at::Tensor control_latents;
        if (control.defined()) {
            const at::ScalarType vae_dtype = model.vae->parameters().front().scalar_type();
            const at::Tensor z = model.vae->encode(control.to(device).to(vae_dtype)).mean;
            control_latents = scaled_latents(vc, z.to(at::kFloat));
        }
        const at::Tensor packed = flux_pack_latents(
            flex2_channels(at::zeros_like(noise, noise.options().device(device)), control_latents));
        const int64_t latent_width = latents.size(2);
        channel_tokens =
            packed.narrow(2, latent_width, packed.size(2) - latent_width).to(dtype).contiguous();
    } else if (control.defined()) {
        // Kontext: the control image's latents (the distribution's mode, scaled as training
        // latents are) join every step's sequence after the target's, ids marked 1.
        const at::ScalarType vae_dtype = model.vae->parameters().front().scalar_type();
        const at::Tensor z = model.vae->encode(control.to(device).to(vae_dtype)).mean;
        control_tokens = flux_pack_latents(scaled_latents(vc, z.to(at::kFloat))).to(dtype);
        in.img_ids = at::cat({in.img_ids, flux_control_ids(z.size(2), z.size(3),
                                                           at::TensorOptions().device(device))});
    }
    const int64_t target_tokens = latents.size(1);
    // The shift follows the target's token count only, as FluxKontextPipeline computes it.
    const FlowMatchEulerSampler sampler(model.scheduler, steps, target_tokens);
    for (int64_t i = 0; i < sampler.steps(); ++i) {
        // The pipeline passes timestep / 1000, rounding as float32 does.
        in.timestep = (sampler.timesteps()[i].expand({batch}) / 1000).to(device);
        in.hidden_states = latents.to(dtype);
        if (control_tokens.defined()) {
            in.hidden_states = at::cat({in.hidden_states, control_tokens}, 1);
        }
        if (channel_tokens.defined()) {
            in.hidden_states = at::cat({in.hidden_states, channel_tokens}, 2);
        }
        const at::Tensor velocity = transformer.forward(in).narrow(1, 0, target_tokens);
        latents = sampler.step(velocity.to(at::kFloat), i, latents);
    }
    return flux_decode_latents(model.vae, latents, height, width);
}

at::Tensor flux_decode_latents(AutoencoderKL& vae, const at::Tensor& packed, int64_t height,
                               int64_t width) {
    const VAEConfig& vc = vae->config();
    at::Tensor z = flux_unpack_latents(packed, height, width) / vc.scaling_factor;
    if (vc.shift_factor) z = z + *vc.shift_factor;
    return vae->decode(z.to(vae->parameters().front().scalar_type())).to(at::kFloat);
}

at::Tensor flux_initial_noise(const FluxModel& model, int64_t seed, int64_t width, int64_t height) {
    return flux_initial_noise(model.vae, seed, width, height);
}

at::Tensor flux_initial_noise(const AutoencoderKL& vae, int64_t seed, int64_t width,
                              int64_t height) {
    const int64_t factor = vae->scale_factor();
    const int64_t channels = vae->config().latent_channels;
    at::Generator gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
    return at::randn({1, channels, 2 * (height / (factor * 2)), 2 * (width / (factor * 2))}, gen,
                     at::TensorOptions().dtype(at::kFloat));
}

std::vector<at::Tensor> generate_flux_previews(FluxModel& model,
                                               const std::vector<PreviewRequest>& requests,
                                               const PreviewOptions& options,
                                               const at::Device& device,
                                               std::size_t max_sequence_length) {
    std::vector<at::Tensor> images(requests.size());
    for (const std::vector<std::size_t>& group : preview_groups(requests, options.batch_prompts)) {
        const PreviewRequest& first = requests[group.front()];
        std::vector<std::string> prompts;
        std::vector<at::Tensor> noise;
        std::vector<at::Tensor> controls;
        for (std::size_t i : group) {
            prompts.push_back(requests[i].prompt);
            noise.push_back(
                flux_initial_noise(model, requests[i].seed, requests[i].width, requests[i].height));
            if (requests[i].control.defined()) controls.push_back(requests[i].control);
        }
        // preview_groups never mixes requests with and without a control image.
        const at::Tensor control = controls.empty() ? at::Tensor() : at::stack(controls);
        const auto out = to_rgb8(flux_sample(model, prompts, at::cat(noise).to(device), first.steps,
                                             first.guidance_scale, max_sequence_length, control));
        for (std::size_t k = 0; k < group.size(); ++k) images[group[k]] = out[k];
    }
    return images;
}

}  // namespace loom
