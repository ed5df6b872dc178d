#include "loom/model/zimage/zimage_family.h"

#include <ATen/ATen.h>

#include "loom/core/error.h"
#include "loom/model/zimage/zimage_preview_sampler.h"

namespace loom {

std::unique_ptr<ModelFamily> ZImageFamily::load(const std::filesystem::path& root, config::Arch,
                                                const FamilyLoadOptions& options) {
    ZImageLoadOptions o;
    o.dtype = options.dtype;
    ZImageModel model = load_zimage(root, o);
    // ai-toolkit trains and samples with its own scheduler config, whatever the folder's says.
    model.scheduler.shift = kShift;
    model.scheduler.use_dynamic_shifting = false;
    return std::make_unique<ZImageFamily>(std::move(model));
}

std::vector<torch::nn::Module*> ZImageFamily::encoders() {
    std::vector<torch::nn::Module*> out;
    if (model_.vae) out.push_back(model_.vae.get());
    if (model_.text_encoder) out.push_back(model_.text_encoder.get());
    return out;
}

// The main layers only: ai-toolkit's get_transformer_block_names is ["layers"], so its LoRA
// skips the noise and context refiners, the embedders and the final layer.
const DenoiserBlocks& ZImageFamily::declared_blocks() {
    static const DenoiserBlocks blocks{{"layers."}, LoRATargeting::kBlockLinears, /*experts=*/{}};
    return blocks;
}

void ZImageFamily::set_gradient_checkpointing(bool on) {
    model_.transformer->set_gradient_checkpointing(on);
}

void ZImageFamily::set_channels_last(bool on) {
    if (model_.vae) model_.vae->set_channels_last(on);
}

LatentDistribution ZImageFamily::encode_pixels(const at::Tensor& pixels) {
    return model_.vae->encode(pixels);
}

at::Tensor ZImageFamily::training_latents(const at::Tensor& z) const {
    return scaled_latents(model_.vae->config(), z);
}

at::ScalarType ZImageFamily::vae_dtype() {
    return model_.vae->parameters().front().scalar_type();
}

TextConditioning ZImageFamily::encode_prompts(const std::vector<std::string>& prompts) {
    return model_.encode_prompts(prompts, kMaxSequenceLength);
}

at::Tensor ZImageFamily::extra_conditioning(int64_t, int64_t, int64_t) const {
    return {};
}

NoiseScheduleConfig ZImageFamily::ddpm_schedule() const {
    throw Error("model 'zimage' trains with flow matching; it has no DDPM schedule");
}

at::Tensor ZImageFamily::predict(const at::Tensor& noisy, const at::Tensor& timesteps,
                                 const StepConditioning& c) {
    ZImageInputs in;
    in.latents = noisy;
    in.captions = c.context;
    in.caption_lengths = zimage_caption_lengths(c.context_mask);
    // ai-toolkit: timestep_model_input = (1000 - timestep) / 1000, and the output negated.
    in.timestep = (1000 - timesteps.to(at::kFloat)) / 1000;
    return -model_.transformer->forward(in);
}

std::vector<at::Tensor> ZImageFamily::sample(const std::vector<PreviewRequest>& requests,
                                             const PreviewOptions& options,
                                             const at::Device& device) {
    return generate_zimage_previews(
        model_, requests, options, device,
        options.max_sequence_length ? options.max_sequence_length : kMaxSequenceLength);
}

}  // namespace loom
