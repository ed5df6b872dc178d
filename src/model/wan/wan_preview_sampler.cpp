#include "loom/model/wan/wan_preview_sampler.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "loom/core/error.h"
#include "loom/model/schedules/flow_match.h"

namespace loom {

at::Tensor wan_sample(WanModel& model, const std::vector<std::string>& prompts,
                      const std::vector<std::string>& negatives, const at::Tensor& noise,
                      int64_t steps, double guidance, std::size_t max_sequence_length,
                      const WanDenoiserAt& denoiser_at) {
    if (!model.vae || !model.text_encoder) {
        throw Error("Wan sampling needs the VAE and the text encoder loaded");
    }
    const bool guided = guidance > 1.0;
    if (guided && negatives.size() != prompts.size()) {
        throw Error("Wan sampling: one negative prompt per prompt");
    }
    torch::NoGradGuard no_grad;
    const at::Tensor context = model.encode_prompts(prompts, max_sequence_length).context;
    const at::Tensor uncond_context =
        guided ? model.encode_prompts(negatives, max_sequence_length).context : at::Tensor();
    const auto sampler = FlowMatchEulerSampler::scheduler_spaced(model.scheduler, steps);
    at::Tensor latents = noise;
    for (int64_t i = 0; i < sampler.steps(); ++i) {
        const double step_t = sampler.timesteps()[i].item<double>();
        WanTransformer3DModelImpl& transformer =
            denoiser_at ? denoiser_at(step_t) : *model.transformer;
        const at::Tensor weight = transformer.parameters().front();
        const at::ScalarType dtype = weight.scalar_type();
        const at::Device device = weight.device();
        const at::Tensor t = sampler.timesteps()[i].expand({latents.size(0)}).to(device);
        const at::Tensor input = latents.to(device).to(dtype);
        at::Tensor prediction = transformer.forward(input, t, context.to(device).to(dtype));
        if (guided) {
            const at::Tensor uncond =
                transformer.forward(input, t, uncond_context.to(device).to(dtype));
            prediction = uncond + guidance * (prediction - uncond);
        }
        latents = sampler.step(prediction, i, latents.to(device));
    }
    const at::ScalarType vae_dtype = model.vae->parameters().front().scalar_type();
    const at::Tensor z = model.vae->denormalize_latents(latents.to(vae_dtype));
    return model.vae->decode(z).to(at::kFloat);
}

at::Tensor wan_initial_noise(const WanModel& model, int64_t seed, int64_t width, int64_t height,
                             int64_t frames) {
    const WanVAEConfig& vc = model.vae->config();
    const int64_t side = vc.spatial_compression();
    at::Generator gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
    return at::randn(
        {1, vc.z_dim, (frames - 1) / vc.temporal_compression() + 1, height / side, width / side},
        gen, at::TensorOptions().dtype(at::kFloat));
}

int64_t wan_pipeline_frames(int64_t frames, int64_t temporal_compression) {
    if (frames % temporal_compression == 1) return frames;
    return frames / temporal_compression * temporal_compression + 1;
}

std::vector<at::Tensor> generate_wan_previews(
    WanModel& model, const std::vector<PreviewRequest>& requests, const PreviewOptions& options,
    const at::Device& device, std::size_t max_sequence_length, const WanDenoiserAt& denoiser_at) {
    std::vector<at::Tensor> images(requests.size());
    for (const std::vector<std::size_t>& group : preview_groups(requests, options.batch_prompts)) {
        const PreviewRequest& first = requests[group.front()];
        const int64_t frames =
            wan_pipeline_frames(first.frames, model.vae->config().temporal_compression());
        std::vector<std::string> prompts;
        std::vector<std::string> negatives;
        std::vector<at::Tensor> noise;
        for (std::size_t i : group) {
            prompts.push_back(requests[i].prompt);
            negatives.push_back(requests[i].negative);
            noise.push_back(wan_initial_noise(model, requests[i].seed, requests[i].width,
                                              requests[i].height, frames));
        }
        const at::Tensor clips =
            wan_sample(model, prompts, negatives, at::cat(noise).to(device), first.steps,
                       first.guidance_scale, max_sequence_length, denoiser_at);
        for (std::size_t k = 0; k < group.size(); ++k) {
            // [3, F, H, W] -> F images [H, W, 3]; one frame is an image.
            const std::vector<at::Tensor> rgb =
                to_rgb8(clips[static_cast<int64_t>(k)].transpose(0, 1));
            images[group[k]] = rgb.size() == 1 ? rgb.front() : at::stack(rgb);
        }
    }
    return images;
}

}  // namespace loom
