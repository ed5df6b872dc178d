#include "loom/model/sd_family.h"

#include "loom/core/error.h"

namespace loom {

std::vector<torch::nn::Module*> StableDiffusionFamily::encoders() {
    std::vector<torch::nn::Module*> out;
    if (model_.vae) out.push_back(model_.vae.get());
    if (model_.text_encoder) out.push_back(model_.text_encoder.get());
    if (model_.text_encoder_2) out.push_back(model_.text_encoder_2.get());
    return out;
}

bool StableDiffusionFamily::streams_weights_of(const std::string& name) const {
    return name.rfind("down_blocks.", 0) == 0 || name.rfind("mid_block.", 0) == 0 ||
           name.rfind("up_blocks.", 0) == 0;
}

void StableDiffusionFamily::set_gradient_checkpointing(bool on) {
    model_.unet->set_gradient_checkpointing(on);
}

void StableDiffusionFamily::set_channels_last(bool on) {
    model_.unet->set_channels_last(on);
    if (model_.vae) model_.vae->set_channels_last(on);
}

LatentDistribution StableDiffusionFamily::encode_pixels(const at::Tensor& pixels) {
    return model_.vae->encode(pixels);
}

at::Tensor StableDiffusionFamily::training_latents(const at::Tensor& z) const {
    return scaled_latents(model_.vae->config(), z);
}

at::ScalarType StableDiffusionFamily::vae_dtype() {
    return model_.vae->parameters().front().scalar_type();
}

TextConditioning StableDiffusionFamily::encode_prompts(const std::vector<std::string>& prompts) {
    return model_.encode_prompts(prompts);
}

at::Tensor StableDiffusionFamily::extra_conditioning(int64_t height, int64_t width,
                                                     int64_t batch) const {
    // SDXL's micro-conditioning: the size ids beside its pooled embedding.
    if (!model_.text_encoder_2) return {};
    return StableDiffusion::time_ids(height, width, batch);
}

FlowMatchConfig StableDiffusionFamily::flow_match() const {
    throw Error(std::string("model '") + config::to_string(model_.arch) +
                "' trains with DDPM; it has no flow-matching config");
}

at::Tensor StableDiffusionFamily::predict(const at::Tensor& noisy, const at::Tensor& timesteps,
                                          const StepConditioning& c) {
    return model_.unet->forward(noisy, timesteps, c.context, c.pooled, c.extra);
}

std::vector<at::Tensor> StableDiffusionFamily::sample(const std::vector<PreviewRequest>& requests,
                                                      const PreviewOptions& options,
                                                      const at::Device& device) {
    return generate_previews(model_, requests, options, device);
}

}  // namespace loom
