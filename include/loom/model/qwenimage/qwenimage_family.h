#pragma once

// Qwen-Image as a model family (model/family.h): the dual-stream transformer
// (qwenimage/qwenimage_transformer.h) is the denoiser, flow matching the objective (the target
// noise - latents, timesteps from the folder's scheduler: exponential dynamic shift), Qwen2.5-VL's
// language model the text encoder — each caption's real tokens' hidden states after the
// template's prefix, cached with their mask — and QwenImagePipeline's loop with true CFG the
// previews. Images are one-frame clips of the Wan-derived VAE, normalised per channel. The LoRA
// goes on every Linear of the transformer blocks (ai-toolkit's "transformer_blocks") and is saved
// as ai-toolkit saves it: diffusers' names under diffusion_model.
//
// The Edit archs (qwen_image_edit, qwen_image_edit_plus) load an Edit pipeline's folder and train
// on paired control images: each caption is encoded with its item's controls (Qwen2.5-VL reads
// them as the pipeline does, so cached embeddings key on the controls too), and their latents
// ride after the target's on the transformer's sequence, the prediction cut back to the target's
// tokens. Edit fits its control to the item's bucket (ai-toolkit's condition_noisy_latents);
// Edit-2509 encodes each control at about a megapixel at its own aspect (the pipeline's
// VAE_IMAGE_SIZE; the target's area with model_kwargs.match_target_res).
//
// ref: ai-toolkit extensions_built_in/diffusion_models/qwen_image/{qwen_image.py,
//      qwen_image_edit.py, qwen_image_edit_plus.py}

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "loom/model/component_eval.h"
#include "loom/model/family.h"
#include "loom/model/qwenimage/qwenimage_model.h"

namespace loom {

class QwenImageFamily final : public ModelFamily {
  public:
    static const DenoiserBlocks& declared_blocks();
    static std::unique_ptr<ModelFamily> load(const std::filesystem::path& root, config::Arch arch,
                                             const FamilyLoadOptions& options);
    static const std::vector<EvalComponent>& eval_components();

    // QwenImagePipeline.encode_prompt's max_sequence_length.
    static constexpr std::size_t kMaxSequenceLength = 1024;

    QwenImageFamily(QwenImageModel model, config::Arch arch, bool match_target_res = false)
        : model_(std::move(model)), arch_(arch), match_target_res_(match_target_res) {}

    QwenImageModel& model() { return model_; }

    config::Arch arch() const override { return arch_; }
    const std::filesystem::path& root() const override { return model_.folder.root; }
    torch::nn::Module& denoiser() override { return *model_.transformer; }
    std::vector<torch::nn::Module*> encoders() override;
    const DenoiserBlocks& blocks() const override { return declared_blocks(); }
    void set_gradient_checkpointing(bool on) override;
    void set_channels_last(bool on) override;
    // The text mask becomes the attention bias on the host.
    bool predict_is_capturable() const override { return false; }

    LatentDistribution encode_pixels(const at::Tensor& pixels) override;
    at::Tensor training_latents(const at::Tensor& z) const override;
    at::ScalarType vae_dtype() override;
    TextConditioning encode_prompts(const std::vector<std::string>& prompts) override;
    TextConditioning encode_prompts_with_controls(
        const std::vector<std::string>& prompts,
        const std::vector<std::vector<at::Tensor>>& controls) override;
    std::pair<int64_t, int64_t> control_size(int64_t control_width, int64_t control_height,
                                             int64_t target_width,
                                             int64_t target_height) const override;
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
    QwenImageModel model_;
    config::Arch arch_;
    bool match_target_res_;
};

}  // namespace loom
