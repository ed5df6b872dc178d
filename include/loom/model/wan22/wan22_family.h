#pragma once

// Wan 2.2 14B text-to-video as a model family (model/family.h): two Wan transformers as experts
// of one denoiser. In training a sample goes to the high-noise expert when its timestep is above
// the boundary (875 of 1000 for text-to-video) and to the low-noise one otherwise, as ai-toolkit's
// DualWanTransformer3DModel routes a batch by its mean timestep (loom routes each sample, so a
// micro-batch split by the ladder routes as the whole did); each trained expert draws its
// timesteps from its own range (train/objective.h) and has its own LoRA file. Previews switch at
// the boundary as WanPipeline does (the high-noise expert at and above it). Everything else —
// the VAE, UMT5, the latents, the one-frame clips of images — is Wan 2.1's (wan/wan_model.h).
//
// ref: ai-toolkit extensions_built_in/diffusion_models/wan22/wan22_14b_model.py
//      (DualWanTransformer3DModel.forward, train_high_noise / train_low_noise, save_lora);
//      diffusers pipelines/wan/pipeline_wan.py::WanPipeline.__call__ (boundary_timestep)

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "loom/model/component_eval.h"
#include "loom/model/family.h"
#include "loom/model/wan22/wan22_model.h"

namespace loom {

class Wan22Family final : public ModelFamily {
  public:
    static const DenoiserBlocks& declared_blocks();
    static std::unique_ptr<ModelFamily> load(const std::filesystem::path& root, config::Arch arch,
                                             const FamilyLoadOptions& options);
    static const std::vector<EvalComponent>& eval_components();

    static constexpr std::size_t kMaxSequenceLength = 512;
    static constexpr std::size_t kHighNoise = 0;
    static constexpr std::size_t kLowNoise = 1;

    // `trained`: whether the high- and the low-noise expert train (both when empty).
    Wan22Family(Wan22Model model, config::Arch arch, std::vector<bool> trained);

    Wan22Model& model() { return model_; }

    config::Arch arch() const override { return arch_; }
    const std::filesystem::path& root() const override { return model_.base.folder.root; }
    torch::nn::Module& denoiser() override { return *model_.experts; }
    std::vector<torch::nn::Module*> encoders() override { return model_.base.encoders(); }
    const DenoiserBlocks& blocks() const override { return declared_blocks(); }
    void set_gradient_checkpointing(bool on) override;
    void set_channels_last(bool) override {}  // 3D convolutions
    // The router reads the timesteps on the host.
    bool predict_is_capturable() const override { return false; }

    int64_t temporal_compression() const override;
    LatentDistribution encode_pixels(const at::Tensor& pixels) override {
        return model_.base.encode_pixels(pixels);
    }
    at::Tensor training_latents(const at::Tensor& z) const override;
    at::ScalarType vae_dtype() override { return model_.base.vae_dtype(); }
    TextConditioning encode_prompts(const std::vector<std::string>& prompts) override;
    at::Tensor extra_conditioning(int64_t, int64_t, int64_t) const override { return {}; }

    ObjectiveKind objective_kind() const override { return ObjectiveKind::kFlowMatch; }
    NoiseScheduleConfig ddpm_schedule() const override;
    FlowMatchConfig flow_match() const override;
    // noisy: [B, C, F, h, w]; timesteps: [B] in [0, 1000]. Each sample through its expert.
    at::Tensor predict(const at::Tensor& noisy, const at::Tensor& timesteps,
                       const StepConditioning& conditioning) override;

    std::vector<ExpertSpan> expert_spans() const override;
    std::vector<bool> trained_experts() const override { return trained_; }
    torch::nn::Module* expert(std::size_t index) override;

    std::vector<at::Tensor> sample(const std::vector<PreviewRequest>& requests,
                                   const PreviewOptions& options,
                                   const at::Device& device) override;

  private:
    WanTransformer3DModelImpl& expert_module(std::size_t index);

    Wan22Model model_;
    config::Arch arch_;
    std::vector<bool> trained_;
};

}  // namespace loom
