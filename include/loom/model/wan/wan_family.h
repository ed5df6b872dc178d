#pragma once

// Wan 2.1 text-to-video as a model family (model/family.h): the transformer over latent clips
// [B, 16, F, h, w] is the denoiser, flow matching with shift 3 the objective, UMT5 at 512 tokens
// (trimmed and zero-padded as WanPipeline does) the text encoder, the video VAE with per-channel
// normalisation the latents. An image is a one-frame clip, as ai-toolkit trains Wan on images.
//
// ref: ai-toolkit toolkit/models/wan21/wan21.py::Wan21.{encode_images, get_prompt_embeds
//      (max_sequence_length 512), get_noise_prediction, get_loss_target (noise - latents),
//      get_bucket_divisibility (16), get_transformer_block_names (blocks)}

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "loom/model/component_eval.h"
#include "loom/model/family.h"
#include "loom/model/wan/wan_model.h"

namespace loom {

class WanFamily final : public ModelFamily {
  public:
    // The denoiser's blocks (model/denoiser_blocks.h), known without loading a model.
    static const DenoiserBlocks& declared_blocks();
    // Its row in model/family_registry.h: a folder of `arch` loaded, the `loom eval`
    // components.
    static std::unique_ptr<ModelFamily> load(const std::filesystem::path& root, config::Arch arch,
                                             const FamilyLoadOptions& options);
    static const std::vector<EvalComponent>& eval_components();

    static constexpr std::size_t kMaxSequenceLength = 512;

    WanFamily(WanModel model, config::Arch arch) : model_(std::move(model)), arch_(arch) {}

    WanModel& model() { return model_; }

    config::Arch arch() const override { return arch_; }
    const std::filesystem::path& root() const override { return model_.folder.root; }
    torch::nn::Module& denoiser() override { return *model_.transformer; }
    std::vector<torch::nn::Module*> encoders() override;
    const DenoiserBlocks& blocks() const override { return declared_blocks(); }
    void set_gradient_checkpointing(bool on) override;
    // Channels-last is a 2D layout; the Wan VAE's convolutions are 3D.
    void set_channels_last(bool) override {}
    // The RoPE tables are built per call from the clip's shape on the host.
    bool predict_is_capturable() const override { return false; }

    int64_t temporal_compression() const override;
    LatentDistribution encode_pixels(const at::Tensor& pixels) override;
    at::Tensor training_latents(const at::Tensor& z) const override;
    at::ScalarType vae_dtype() override;
    TextConditioning encode_prompts(const std::vector<std::string>& prompts) override;
    at::Tensor extra_conditioning(int64_t, int64_t, int64_t) const override { return {}; }

    ObjectiveKind objective_kind() const override { return ObjectiveKind::kFlowMatch; }
    NoiseScheduleConfig ddpm_schedule() const override;
    FlowMatchConfig flow_match() const override { return model_.scheduler; }
    // noisy: [B, C, F, h, w]; timesteps: [B] in [0, 1000] as the transformer takes them.
    at::Tensor predict(const at::Tensor& noisy, const at::Tensor& timesteps,
                       const StepConditioning& conditioning) override;

    std::vector<at::Tensor> sample(const std::vector<PreviewRequest>& requests,
                                   const PreviewOptions& options,
                                   const at::Device& device) override;

  private:
    WanModel model_;
    config::Arch arch_;
};

}  // namespace loom
