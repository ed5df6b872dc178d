#include "loom/model/preview_sampler.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "loom/core/error.h"
#include "loom/model/schedules/noise_schedule.h"

namespace loom {

namespace {

// One group of requests sharing size and step count goes through the sampler together.
struct Group {
    std::vector<std::size_t> indices;
};

at::Tensor initial_noise(const PreviewRequest& r, int64_t latent_channels, int64_t factor) {
    at::Generator gen = at::detail::createCPUGenerator(static_cast<uint64_t>(r.seed));
    return at::randn({1, latent_channels, r.height / factor, r.width / factor}, gen,
                     at::TensorOptions().dtype(at::kFloat));
}

// Predicts the noise for `latents` at timestep `t` with classifier-free guidance.
// The sampler's math runs in float32; the UNet in its own dtype (bf16 when training in bf16).
at::Tensor guided_prediction(StableDiffusion& model, const at::Tensor& latents_f32,
                             const at::Tensor& t, const TextConditioning& cond,
                             const TextConditioning& uncond, const at::Tensor& time_ids,
                             double scale, bool batch_guidance) {
    auto& unet = *model.unet;
    const at::ScalarType dtype = unet.parameters().front().scalar_type();
    const at::Tensor latents = latents_f32.to(dtype);
    if (scale <= 1.0) {
        return unet.forward(latents, t, cond.context, cond.text_embeds, time_ids).to(at::kFloat);
    }
    if (batch_guidance) {
        const at::Tensor both = at::cat({latents, latents});
        const at::Tensor ctx = at::cat({uncond.context, cond.context});
        const at::Tensor te = cond.text_embeds.defined()
                                  ? at::cat({uncond.text_embeds, cond.text_embeds})
                                  : at::Tensor();
        const at::Tensor ids = time_ids.defined() ? at::cat({time_ids, time_ids}) : at::Tensor();
        const auto parts =
            unet.forward(both, at::cat({t, t}), ctx, te, ids).to(at::kFloat).chunk(2);
        return apply_guidance(parts[0], parts[1], scale);
    }
    const at::Tensor u =
        unet.forward(latents, t, uncond.context, uncond.text_embeds, time_ids).to(at::kFloat);
    const at::Tensor c =
        unet.forward(latents, t, cond.context, cond.text_embeds, time_ids).to(at::kFloat);
    return apply_guidance(u, c, scale);
}

std::vector<at::Tensor> run_group(StableDiffusion& model,
                                  const std::vector<PreviewRequest>& requests,
                                  const std::vector<std::size_t>& indices,
                                  const PreviewOptions& options, const at::Device& device) {
    const PreviewRequest& first = requests[indices.front()];
    const NoiseSchedule schedule(model.scheduler);
    const int64_t factor = model.vae->scale_factor();
    const int64_t latent_channels = model.vae->config().latent_channels;
    std::vector<std::string> prompts;
    std::vector<std::string> negatives;
    std::vector<at::Tensor> noise;
    for (std::size_t i : indices) {
        prompts.push_back(requests[i].prompt);
        negatives.push_back(requests[i].negative);
        noise.push_back(initial_noise(requests[i], latent_channels, factor));
    }
    const TextConditioning cond = model.encode_prompts(prompts);
    const TextConditioning uncond = model.encode_prompts(negatives);
    const auto batch = static_cast<int64_t>(indices.size());
    at::Tensor time_ids;
    if (model.text_encoder_2) {
        time_ids = StableDiffusion::time_ids(first.height, first.width, batch).to(device);
    }
    at::Tensor latents = at::cat(noise).to(device);
    const bool euler = options.sampler == config::PreviewSampler::kEuler;
    if (euler) {
        const EulerSampler sampler(schedule, first.steps);
        latents = latents * sampler.init_noise_sigma();
        for (std::size_t i = 0; i < sampler.timesteps().size(); ++i) {
            const at::Tensor t = at::full({batch}, sampler.timesteps()[i], at::kFloat).to(device);
            const at::Tensor eps =
                guided_prediction(model, sampler.scale_model_input(latents, i), t, cond, uncond,
                                  time_ids, first.guidance_scale, options.batch_guidance);
            latents = sampler.step(eps, i, latents);
        }
    } else {
        const DDIMSampler sampler(schedule, first.steps);
        for (int64_t step : sampler.timesteps()) {
            const at::Tensor t = at::full({batch}, step, at::kLong).to(device);
            const at::Tensor eps = guided_prediction(model, latents, t, cond, uncond, time_ids,
                                                     first.guidance_scale, options.batch_guidance);
            latents = sampler.step(eps, step, latents);
        }
    }
    const VAEConfig& vc = model.vae->config();
    at::Tensor z = latents / vc.scaling_factor;
    if (vc.shift_factor) z = z + *vc.shift_factor;
    const at::Tensor images = model.vae->decode(z.to(model.vae->parameters().front().scalar_type()))
                                  .to(at::kFloat);  // [B, 3, H, W] in about [-1, 1]
    return to_rgb8(images);
}

}  // namespace

std::vector<std::vector<std::size_t>> preview_groups(const std::vector<PreviewRequest>& requests,
                                                     bool batch_prompts) {
    std::vector<std::vector<std::size_t>> groups;
    std::vector<bool> done(requests.size(), false);
    for (std::size_t i = 0; i < requests.size(); ++i) {
        if (done[i]) continue;
        std::vector<std::size_t> group = {i};
        done[i] = true;
        if (batch_prompts) {
            for (std::size_t j = i + 1; j < requests.size(); ++j) {
                const PreviewRequest& a = requests[i];
                const PreviewRequest& b = requests[j];
                if (!done[j] && a.width == b.width && a.height == b.height && a.steps == b.steps &&
                    a.guidance_scale == b.guidance_scale && a.frames == b.frames &&
                    a.control.defined() == b.control.defined()) {
                    group.push_back(j);
                    done[j] = true;
                }
            }
        }
        groups.push_back(std::move(group));
    }
    return groups;
}

std::vector<at::Tensor> sample_in_groups(
    const std::vector<PreviewRequest>& requests, const PreviewOptions& options,
    const at::Device& device, const std::function<at::Tensor(const PreviewRequest&)>& initial_noise,
    const GroupSampler& sample) {
    std::vector<at::Tensor> images(requests.size());
    for (const std::vector<std::size_t>& group : preview_groups(requests, options.batch_prompts)) {
        std::vector<std::string> prompts;
        std::vector<std::string> negatives;
        std::vector<at::Tensor> noise;
        for (std::size_t i : group) {
            prompts.push_back(requests[i].prompt);
            negatives.push_back(requests[i].negative);
            noise.push_back(initial_noise(requests[i]));
        }
        const auto out =
            to_rgb8(sample(prompts, negatives, at::cat(noise).to(device), requests[group.front()]));
        for (std::size_t k = 0; k < group.size(); ++k) images[group[k]] = out[k];
    }
    return images;
}

std::vector<at::Tensor> to_rgb8(const at::Tensor& images) {
    std::vector<at::Tensor> out;
    for (int64_t b = 0; b < images.size(0); ++b) {
        out.push_back(((images[b].clamp(-1, 1) + 1) * 127.5)
                          .round()
                          .to(at::kByte)
                          .permute({1, 2, 0})
                          .contiguous()
                          .cpu());
    }
    return out;
}

std::vector<at::Tensor> generate_previews(StableDiffusion& model,
                                          const std::vector<PreviewRequest>& requests,
                                          const PreviewOptions& options, const at::Device& device) {
    if (!model.vae || !model.text_encoder) {
        throw Error("preview sampling needs the VAE and the text encoder loaded");
    }
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> images(requests.size());
    for (const std::vector<std::size_t>& group : preview_groups(requests, options.batch_prompts)) {
        const auto out = run_group(model, requests, group, options, device);
        for (std::size_t k = 0; k < group.size(); ++k) images[group[k]] = out[k];
    }
    return images;
}

}  // namespace loom
