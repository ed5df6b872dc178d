#include "loom/model/qwenimage/qwenimage_family.h"

#include <ATen/ATen.h>

#include "loom/core/error.h"
#include "loom/model/flux/flux_transformer.h"
#include "loom/model/qwenimage/qwenimage_preview_sampler.h"
#include "loom/model/vae/autoencoder_kl.h"

namespace loom {

std::unique_ptr<ModelFamily> QwenImageFamily::load(const std::filesystem::path& root, config::Arch,
                                                   const FamilyLoadOptions& options) {
    QwenImageLoadOptions o;
    o.dtype = options.dtype;
    return std::make_unique<QwenImageFamily>(load_qwenimage(root, o));
}

std::vector<torch::nn::Module*> QwenImageFamily::encoders() {
    std::vector<torch::nn::Module*> out;
    if (model_.vae) out.push_back(model_.vae.get());
    if (model_.text_encoder) out.push_back(model_.text_encoder.get());
    return out;
}

// ai-toolkit's get_transformer_block_names: every Linear of the dual-stream blocks.
const DenoiserBlocks& QwenImageFamily::declared_blocks() {
    static const DenoiserBlocks blocks{{"transformer_blocks."},
                                       LoRATargeting::kBlockLinears,
                                       /*experts=*/{}};
    return blocks;
}

void QwenImageFamily::set_gradient_checkpointing(bool on) {
    model_.transformer->set_gradient_checkpointing(on);
}

void QwenImageFamily::set_channels_last(bool) {
    // The Wan VAE's convolutions are 3D: channels-last does not apply.
}

LatentDistribution QwenImageFamily::encode_pixels(const at::Tensor& pixels) {
    // An image is a one-frame clip, as QwenImagePipeline encodes it; the frame axis goes again.
    const LatentDistribution clip = model_.vae->encode(pixels.unsqueeze(2));
    return {clip.mean.squeeze(2), clip.logvar.squeeze(2)};
}

at::Tensor QwenImageFamily::training_latents(const at::Tensor& z) const {
    // ai-toolkit's encode_images: (z - latents_mean) * (1 / latents_std).
    return model_.vae->normalize_latents(z.unsqueeze(2)).squeeze(2);
}

at::ScalarType QwenImageFamily::vae_dtype() {
    return model_.vae->parameters().front().scalar_type();
}

TextConditioning QwenImageFamily::encode_prompts(const std::vector<std::string>& prompts) {
    return model_.encode_prompts(prompts, kMaxSequenceLength);
}

at::Tensor QwenImageFamily::extra_conditioning(int64_t, int64_t, int64_t) const {
    return {};
}

NoiseScheduleConfig QwenImageFamily::ddpm_schedule() const {
    throw Error("model 'qwen_image' trains with flow matching; it has no DDPM schedule");
}

at::Tensor QwenImageFamily::predict(const at::Tensor& noisy, const at::Tensor& timesteps,
                                    const StepConditioning& c) {
    const int64_t height = noisy.size(2);
    const int64_t width = noisy.size(3);
    QwenImageInputs in;
    in.hidden_states = flux_pack_latents(noisy);
    in.encoder_hidden_states = c.context;
    if (c.context_mask.defined()) in.encoder_hidden_states_mask = c.context_mask;
    // ai-toolkit: timestep / 1000, scaled back inside.
    in.timestep = timesteps.to(at::kFloat) / 1000;
    in.height = height / 2;
    in.width = width / 2;
    return flux_unpack_latents(model_.transformer->forward(in), height, width);
}

std::vector<at::Tensor> QwenImageFamily::sample(const std::vector<PreviewRequest>& requests,
                                                const PreviewOptions& options,
                                                const at::Device& device) {
    return generate_qwenimage_previews(
        model_, requests, options, device,
        options.max_sequence_length ? options.max_sequence_length : kMaxSequenceLength);
}

}  // namespace loom
