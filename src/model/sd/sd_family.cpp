#include "loom/model/sd/sd_family.h"

#include "loom/core/error.h"

namespace loom {

std::unique_ptr<ModelFamily> StableDiffusionFamily::load(const std::filesystem::path& root,
                                                         config::Arch /*arch: detected again*/,
                                                         const FamilyLoadOptions& options) {
    LoadOptions o;
    o.dtype = options.dtype;
    StableDiffusion sd = load_stable_diffusion(root, o);
    if (options.v_prediction) sd.scheduler.prediction_type = "v_prediction";
    return std::make_unique<StableDiffusionFamily>(std::move(sd));
}

std::vector<torch::nn::Module*> StableDiffusionFamily::encoders() {
    std::vector<torch::nn::Module*> out;
    if (model_.vae) out.push_back(model_.vae.get());
    if (model_.text_encoder) out.push_back(model_.text_encoder.get());
    if (model_.text_encoder_2) out.push_back(model_.text_encoder_2.get());
    return out;
}

// The down, mid and up blocks (conv_in/out, the time and added-condition embeddings stay);
// LoRA targets follow the UNet module sets, which look inside them (lora/target_rules.h).
const DenoiserBlocks& StableDiffusionFamily::declared_blocks() {
    static const DenoiserBlocks blocks{{"down_blocks.", "mid_block.", "up_blocks."},
                                       LoRATargeting::kUNetModuleSets,
                                       /*experts=*/{}};
    return blocks;
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
