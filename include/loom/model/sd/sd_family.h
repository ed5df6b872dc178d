#pragma once

// Stable Diffusion (SD 1.x/2.x, SDXL) as a model family (model/family.h): the UNet is the
// denoiser, DDPM (epsilon or v-prediction) the objective, CLIP the text encoder(s), SDXL's size
// ids the extra conditioning, the DDIM/Euler sampler with classifier-free guidance the previews.

#include <memory>
#include <string>
#include <vector>

#include "loom/model/component_eval.h"
#include "loom/model/family.h"
#include "loom/model/sd/stable_diffusion.h"

namespace loom {

class StableDiffusionFamily final : public ModelFamily {
  public:
    // The denoiser's blocks (model/denoiser_blocks.h), known without loading a model.
    static const DenoiserBlocks& declared_blocks();
    // Its row in model/family_registry.h: a folder of `arch` loaded, the `loom eval`
    // components.
    static std::unique_ptr<ModelFamily> load(const std::filesystem::path& root, config::Arch arch,
                                             const FamilyLoadOptions& options);
    static const std::vector<EvalComponent>& eval_components();

    explicit StableDiffusionFamily(StableDiffusion model) : model_(std::move(model)) {}

    StableDiffusion& model() { return model_; }

    config::Arch arch() const override { return model_.arch; }
    const std::filesystem::path& root() const override { return model_.folder.root; }
    torch::nn::Module& denoiser() override { return *model_.unet; }
    std::vector<torch::nn::Module*> encoders() override;
    const DenoiserBlocks& blocks() const override { return declared_blocks(); }
    void set_gradient_checkpointing(bool on) override;
    void set_channels_last(bool on) override;
    bool predict_is_capturable() const override { return true; }

    LatentDistribution encode_pixels(const at::Tensor& pixels) override;
    at::Tensor training_latents(const at::Tensor& z) const override;
    at::ScalarType vae_dtype() override;
    TextConditioning encode_prompts(const std::vector<std::string>& prompts) override;
    at::Tensor extra_conditioning(int64_t height, int64_t width, int64_t batch) const override;

    ObjectiveKind objective_kind() const override { return ObjectiveKind::kDdpm; }
    NoiseScheduleConfig ddpm_schedule() const override { return model_.scheduler; }
    FlowMatchConfig flow_match() const override;
    at::Tensor predict(const at::Tensor& noisy, const at::Tensor& timesteps,
                       const StepConditioning& conditioning) override;

    std::vector<at::Tensor> sample(const std::vector<PreviewRequest>& requests,
                                   const PreviewOptions& options,
                                   const at::Device& device) override;

  private:
    StableDiffusion model_;
};

}  // namespace loom
