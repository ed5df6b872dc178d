#include "loom/model/chroma/chroma_family.h"

#include <ATen/ATen.h>

#include "loom/core/error.h"
#include "loom/model/chroma/chroma_preview_sampler.h"

namespace loom {

std::unique_ptr<ModelFamily> ChromaFamily::load(const std::filesystem::path& root, config::Arch,
                                                const FamilyLoadOptions& options) {
    ChromaLoadOptions o;
    o.dtype = options.dtype;
    return std::make_unique<ChromaFamily>(load_chroma(root, o));
}

std::vector<torch::nn::Module*> ChromaFamily::encoders() {
    std::vector<torch::nn::Module*> out;
    if (model_.vae) out.push_back(model_.vae.get());
    if (model_.text_encoder) out.push_back(model_.text_encoder.get());
    return out;
}

// Flux's two block kinds under Flux's names: what ai-toolkit's Chroma LoRA targets (every
// Linear of the blocks; Chroma's have no modulation Linears). The approximator, the embedders
// and the output layer stay on the device and get no LoRA.
const DenoiserBlocks& ChromaFamily::declared_blocks() {
    static const DenoiserBlocks blocks{{"transformer_blocks.", "single_transformer_blocks."},
                                       LoRATargeting::kBlockLinears,
                                       /*experts=*/{}};
    return blocks;
}

void ChromaFamily::set_gradient_checkpointing(bool on) {
    model_.transformer->set_gradient_checkpointing(on);
}

void ChromaFamily::set_channels_last(bool on) {
    if (model_.vae) model_.vae->set_channels_last(on);
}

LatentDistribution ChromaFamily::encode_pixels(const at::Tensor& pixels) {
    return model_.vae->encode(pixels);
}

at::Tensor ChromaFamily::training_latents(const at::Tensor& z) const {
    return scaled_latents(model_.vae->config(), z);
}

at::ScalarType ChromaFamily::vae_dtype() {
    return model_.vae->parameters().front().scalar_type();
}

TextConditioning ChromaFamily::encode_prompts(const std::vector<std::string>& prompts) {
    return model_.encode_prompts(prompts, kMaxSequenceLength);
}

at::Tensor ChromaFamily::extra_conditioning(int64_t, int64_t, int64_t) const {
    return {};
}

NoiseScheduleConfig ChromaFamily::ddpm_schedule() const {
    throw Error("model 'chroma' trains with flow matching; it has no DDPM schedule");
}

at::Tensor ChromaFamily::predict(const at::Tensor& noisy, const at::Tensor& timesteps,
                                 const StepConditioning& c) {
    const int64_t height = noisy.size(2);
    const int64_t width = noisy.size(3);
    const auto on_device = at::TensorOptions().device(noisy.device());
    ChromaInputs in;
    in.hidden_states = flux_pack_latents(noisy);
    in.encoder_hidden_states = c.context;
    // sigma (t / 1000), scaled back inside, as ai-toolkit passes it.
    in.timestep = timesteps.to(at::kFloat) / 1000;
    in.img_ids = flux_image_ids(height, width, on_device);
    in.txt_ids = flux_text_ids(c.context.size(1), on_device);
    if (c.context_mask.defined()) {
        in.attention_mask = chroma_joint_mask(c.context_mask, in.hidden_states.size(1));
    }
    return flux_unpack_latents(model_.transformer->forward(in), height, width);
}

std::vector<at::Tensor> ChromaFamily::sample(const std::vector<PreviewRequest>& requests,
                                             const PreviewOptions& options,
                                             const at::Device& device) {
    return generate_chroma_previews(
        model_, requests, options, device,
        options.max_sequence_length ? options.max_sequence_length : kMaxSequenceLength);
}

}  // namespace loom
