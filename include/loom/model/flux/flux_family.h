#pragma once

// Flux.1 (dev and schnell) as a model family (model/family.h): the transformer over 2x2-packed
// latents is the denoiser, flow matching the objective, T5 (per-token) and CLIP-L (pooled) the
// text encoders, the FluxPipeline's flow-matching Euler loop the previews. Training passes the
// guidance embedding a scale of 1.0 (dev), as ai-toolkit does, or bypasses it
// (train.bypass_guidance_embedding); schnell has none. Kontext joins its control latents on
// the sequence; Flex.2 takes its inpaint and control channels beside the latents
// (flux/flex2_channels.h), its output the latents' velocity alone.
//
// ref: ai-toolkit toolkit/models/flux.py and SDTrainer (guidance_embedding_scale 1.0, T5 at 512
//      tokens), diffusers pipelines/flux/pipeline_flux.py

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "loom/model/component_eval.h"
#include "loom/model/family.h"
#include "loom/model/flux/flux_model.h"

namespace loom {

class FluxFamily final : public ModelFamily {
  public:
    // The denoiser's blocks (model/denoiser_blocks.h), known without loading a model.
    static const DenoiserBlocks& declared_blocks();
    // Its row in model/family_registry.h: a folder of `arch` loaded, the `loom eval`
    // components.
    static std::unique_ptr<ModelFamily> load(const std::filesystem::path& root, config::Arch arch,
                                             const FamilyLoadOptions& options);
    static const std::vector<EvalComponent>& eval_components();

    // T5's token count for training and previews: ai-toolkit encodes Flux prompts at 512.
    static constexpr std::size_t kMaxSequenceLength = 512;
    // The distilled guidance scale a dev transformer sees in training.
    static constexpr double kTrainingGuidance = 1.0;

    FluxFamily(FluxModel model, config::Arch arch, bool bypass_guidance_embedding = false)
        : model_(std::move(model)), arch_(arch), bypass_guidance_(bypass_guidance_embedding) {}

    FluxModel& model() { return model_; }

    config::Arch arch() const override { return arch_; }
    const std::filesystem::path& root() const override { return model_.folder.root; }
    torch::nn::Module& denoiser() override { return *model_.transformer; }
    std::vector<torch::nn::Module*> encoders() override;
    const DenoiserBlocks& blocks() const override { return declared_blocks(); }
    void set_gradient_checkpointing(bool on) override;
    void set_channels_last(bool on) override;
    // The rotary tables are compared with the last ids on the host (flux_transformer.h).
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
    FluxModel model_;
    config::Arch arch_;
    bool bypass_guidance_ = false;  // train.bypass_guidance_embedding: training only
};

}  // namespace loom
