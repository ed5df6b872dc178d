#include "loom/model/flux/flux_family.h"

#include <ATen/ATen.h>

#include "loom/core/error.h"
#include "loom/model/flux/flex2_channels.h"
#include "loom/model/flux/flux_preview_sampler.h"

namespace loom {

std::unique_ptr<ModelFamily> FluxFamily::load(const std::filesystem::path& root, config::Arch arch,
                                              const FamilyLoadOptions& options) {
    FluxLoadOptions o;
    o.dtype = options.dtype;
    return std::make_unique<FluxFamily>(load_flux(root, o), arch,
                                        options.bypass_guidance_embedding);
}

std::vector<torch::nn::Module*> FluxFamily::encoders() {
    std::vector<torch::nn::Module*> out;
    if (model_.vae) out.push_back(model_.vae.get());
    if (model_.text_encoder) out.push_back(model_.text_encoder.get());
    if (model_.text_encoder_2) out.push_back(model_.text_encoder_2.get());
    return out;
}

// Both block kinds: the double-stream blocks hold about a third of the weights, the single
// ones the rest; the embedders and the output layers stay on the device and get no LoRA, as
// ai-toolkit targets FluxTransformer2DModel with transformer_only.
const DenoiserBlocks& FluxFamily::declared_blocks() {
    static const DenoiserBlocks blocks{{"transformer_blocks.", "single_transformer_blocks."},
                                       LoRATargeting::kBlockLinears,
                                       /*experts=*/{}};
    return blocks;
}

void FluxFamily::set_gradient_checkpointing(bool on) {
    model_.transformer->set_gradient_checkpointing(on);
}

void FluxFamily::set_channels_last(bool on) {
    // The transformer has no convolutions; the VAE does.
    if (model_.vae) model_.vae->set_channels_last(on);
}

LatentDistribution FluxFamily::encode_pixels(const at::Tensor& pixels) {
    return model_.vae->encode(pixels);
}

at::Tensor FluxFamily::training_latents(const at::Tensor& z) const {
    return scaled_latents(model_.vae->config(), z);
}

at::ScalarType FluxFamily::vae_dtype() {
    return model_.vae->parameters().front().scalar_type();
}

TextConditioning FluxFamily::encode_prompts(const std::vector<std::string>& prompts) {
    return model_.encode_prompts(prompts, kMaxSequenceLength);
}

at::Tensor FluxFamily::extra_conditioning(int64_t, int64_t, int64_t) const {
    return {};
}

NoiseScheduleConfig FluxFamily::ddpm_schedule() const {
    throw Error(std::string("model '") + config::to_string(arch_) +
                "' trains with flow matching; it has no DDPM schedule");
}

at::Tensor FluxFamily::predict(const at::Tensor& noisy, const at::Tensor& timesteps,
                               const StepConditioning& c) {
    const int64_t batch = noisy.size(0);
    const int64_t height = noisy.size(2);
    const int64_t width = noisy.size(3);
    const auto on_device = at::TensorOptions().device(noisy.device());
    FluxInputs in;
    const bool flex2 = model_.flex2();
    in.hidden_states =
        flux_pack_latents(flex2 ? flex2_channels(noisy, c.control, c.inpaint) : noisy);
    const int64_t target_tokens = in.hidden_states.size(1);
    in.encoder_hidden_states = c.context;
    in.pooled_projections = c.pooled;
    // The transformer takes sigma (t / 1000) and scales it back inside, as ai-toolkit passes it.
    in.timestep = timesteps.to(at::kFloat) / 1000;
    in.img_ids = flux_image_ids(height, width, on_device);
    if (c.control.defined() && !flex2) {
        // Kontext: the clean control latents follow the noisy target on the sequence, their ids
        // marked 1 on the first axis; only the target's tokens are predicted (and so carry the
        // loss), as ai-toolkit's flux_kontext trims the output.
        in.hidden_states =
            at::cat({in.hidden_states, flux_pack_latents(c.control.to(noisy.scalar_type()))}, 1);
        in.img_ids = at::cat(
            {in.img_ids, flux_control_ids(c.control.size(2), c.control.size(3), on_device)});
    }
    in.txt_ids = flux_text_ids(c.context.size(1), on_device);
    if (model_.guidance_distilled()) {
        in.guidance = at::full({batch}, kTrainingGuidance, on_device.dtype(at::kFloat));
        in.bypass_guidance_embedding = bypass_guidance_;
    }
    const at::Tensor out = model_.transformer->forward(in);
    return flux_unpack_latents(out.narrow(1, 0, target_tokens), height, width);
}

std::vector<at::Tensor> FluxFamily::sample(const std::vector<PreviewRequest>& requests,
                                           const PreviewOptions& options,
                                           const at::Device& device) {
    return generate_flux_previews(
        model_, requests, options, device,
        options.max_sequence_length ? options.max_sequence_length : kMaxSequenceLength);
}

}  // namespace loom
