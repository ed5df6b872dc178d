#include "loom/model/wan/wan_family.h"

#include <ATen/ATen.h>

#include "loom/core/error.h"
#include "loom/model/wan/wan_preview_sampler.h"

namespace loom {

std::unique_ptr<ModelFamily> WanFamily::load(const std::filesystem::path& root, config::Arch arch,
                                             const FamilyLoadOptions& options) {
    WanLoadOptions o;
    o.dtype = options.dtype;
    return std::make_unique<WanFamily>(load_wan(root, o), arch);
}

std::vector<torch::nn::Module*> WanFamily::encoders() {
    return model_.encoders();
}

// The blocks hold nearly every weight; the patch embedding, the condition embedder and
// proj_out stay and get no LoRA (ai-toolkit's get_transformer_block_names: ['blocks']).
const DenoiserBlocks& WanFamily::declared_blocks() {
    static const DenoiserBlocks blocks{{"blocks."}, LoRATargeting::kBlockLinears, /*experts=*/{}};
    return blocks;
}

void WanFamily::set_gradient_checkpointing(bool on) {
    model_.transformer->set_gradient_checkpointing(on);
}

int64_t WanFamily::temporal_compression() const {
    return model_.vae->config().temporal_compression();
}

LatentDistribution WanFamily::encode_pixels(const at::Tensor& pixels) {
    return model_.encode_pixels(pixels);
}

at::Tensor WanFamily::training_latents(const at::Tensor& z) const {
    return model_.vae->normalize_latents(z);
}

at::ScalarType WanFamily::vae_dtype() {
    return model_.vae_dtype();
}

TextConditioning WanFamily::encode_prompts(const std::vector<std::string>& prompts) {
    return model_.encode_prompts(prompts, kMaxSequenceLength);
}

NoiseScheduleConfig WanFamily::ddpm_schedule() const {
    throw Error(std::string("model '") + config::to_string(arch_) +
                "' trains with flow matching; it has no DDPM schedule");
}

at::Tensor WanFamily::predict(const at::Tensor& noisy, const at::Tensor& timesteps,
                              const StepConditioning& c) {
    return model_.transformer->forward(noisy, timesteps.to(at::kFloat), c.context);
}

std::vector<at::Tensor> WanFamily::sample(const std::vector<PreviewRequest>& requests,
                                          const PreviewOptions& options, const at::Device& device) {
    return generate_wan_previews(
        model_, requests, options, device,
        options.max_sequence_length ? options.max_sequence_length : kMaxSequenceLength);
}

}  // namespace loom
