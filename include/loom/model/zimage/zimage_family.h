#pragma once

// Z-Image as a model family (model/family.h): the single-stream transformer
// (zimage/zimage_transformer.h) is the denoiser, flow matching the objective, Qwen3 the text
// encoder — its hidden_states[-2] of each caption's real tokens cached per caption — and
// ZImagePipeline's loop the previews. Training runs the transformer as ai-toolkit does
// (z_image.py get_noise_prediction): the timestep fed as (1000 - t) / 1000 and the output
// negated, so that the prediction is noise - latents like Flux's; shift 3 without dynamic
// shifting (its scheduler_config). The LoRA goes on the main layers' Linears only ("layers"; the
// refiners get none, as ai-toolkit's get_transformer_block_names says) and is saved under
// diffusion_model. with diffusers' names.
//
// ref: ai-toolkit extensions_built_in/diffusion_models/z_image/z_image.py

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "loom/model/component_eval.h"
#include "loom/model/family.h"
#include "loom/model/zimage/zimage_model.h"

namespace loom {

class ZImageFamily final : public ModelFamily {
  public:
    // Its row in model/family_registry.h.
    static const DenoiserBlocks& declared_blocks();
    static std::unique_ptr<ModelFamily> load(const std::filesystem::path& root, config::Arch arch,
                                             const FamilyLoadOptions& options);
    static const std::vector<EvalComponent>& eval_components();

    // Qwen3's token count for training and previews: ZImagePipeline's max_sequence_length.
    static constexpr std::size_t kMaxSequenceLength = 512;
    // ai-toolkit's scheduler_config for Z-Image (z_image.py): shift 3, no dynamic shifting, for
    // training and previews alike; the folder's scheduler_config.json gives the rest.
    static constexpr double kShift = 3.0;

    explicit ZImageFamily(ZImageModel model) : model_(std::move(model)) {}

    ZImageModel& model() { return model_; }

    config::Arch arch() const override { return config::Arch::kZImage; }
    const std::filesystem::path& root() const override { return model_.folder.root; }
    torch::nn::Module& denoiser() override { return *model_.transformer; }
    std::vector<torch::nn::Module*> encoders() override;
    const DenoiserBlocks& blocks() const override { return declared_blocks(); }
    void set_gradient_checkpointing(bool on) override;
    void set_channels_last(bool on) override;
    // The caption lengths are read on the host.
    bool predict_is_capturable() const override { return false; }

    LatentDistribution encode_pixels(const at::Tensor& pixels) override;
    at::Tensor training_latents(const at::Tensor& z) const override;
    at::ScalarType vae_dtype() override;
    TextConditioning encode_prompts(const std::vector<std::string>& prompts) override;
    at::Tensor extra_conditioning(int64_t height, int64_t width, int64_t batch) const override;

    ObjectiveKind objective_kind() const override { return ObjectiveKind::kFlowMatch; }
    NoiseScheduleConfig ddpm_schedule() const override;
    FlowMatchConfig flow_match() const override { return model_.scheduler; }
    at::Tensor predict(const at::Tensor& noisy, const at::Tensor& timesteps,
                       const StepConditioning& conditioning) override;

    std::vector<at::Tensor> sample(const std::vector<PreviewRequest>& requests,
                                   const PreviewOptions& options,
                                   const at::Device& device) override;

  private:
    ZImageModel model_;
};

}  // namespace loom
