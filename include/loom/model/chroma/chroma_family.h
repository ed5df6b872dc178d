#pragma once

// Chroma as a model family (model/family.h): Flux.1's double- and single-stream blocks fed by
// one modulation approximator (chroma/chroma_transformer.h) are the denoiser, flow matching the
// objective, T5 the only text encoder — its embeddings and the pipeline's token mask cached per
// caption — and ChromaPipeline's loop with a real classifier-free pass the previews. Training
// runs the transformer as ChromaPipeline does (the mask as the pipeline builds it, guidance 0
// in the approximator, as ai-toolkit trains Chroma) and predicts noise − latents like Flux.
//
// ref: ai-toolkit extensions_built_in/diffusion_models/chroma/chroma_model.py (T5 at 512
//      tokens, guidance 0, bucket divisibility 32), diffusers pipelines/chroma/pipeline_chroma.py

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "loom/model/chroma/chroma_model.h"
#include "loom/model/component_eval.h"
#include "loom/model/family.h"

namespace loom {

class ChromaFamily final : public ModelFamily {
  public:
    // Its row in model/family_registry.h.
    static const DenoiserBlocks& declared_blocks();
    static std::unique_ptr<ModelFamily> load(const std::filesystem::path& root, config::Arch arch,
                                             const FamilyLoadOptions& options);
    static const std::vector<EvalComponent>& eval_components();

    // T5's token count for training and previews: ai-toolkit encodes Chroma prompts at 512.
    static constexpr std::size_t kMaxSequenceLength = 512;

    explicit ChromaFamily(ChromaModel model) : model_(std::move(model)) {}

    ChromaModel& model() { return model_; }

    config::Arch arch() const override { return config::Arch::kChroma; }
    const std::filesystem::path& root() const override { return model_.folder.root; }
    torch::nn::Module& denoiser() override { return *model_.transformer; }
    std::vector<torch::nn::Module*> encoders() override;
    const DenoiserBlocks& blocks() const override { return declared_blocks(); }
    void set_gradient_checkpointing(bool on) override;
    void set_channels_last(bool on) override;
    // The rotary tables are compared with the last ids on the host, as Flux's.
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
    ChromaModel model_;
};

}  // namespace loom
