#pragma once

// A Wan 2.2 14B text-to-video model loaded from a diffusers WanPipeline folder: two stock Wan
// transformers as experts — `transformer` denoises the high-noise timesteps, `transformer_2` the
// low-noise ones, split at model_index.json's boundary_ratio (0.875 for text-to-video) — over Wan
// 2.1's VAE and UMT5, which it shares with Wan 2.1's model (wan/wan_model.h).
//
// ref: diffusers pipelines/wan/pipeline_wan.py (transformer_2, boundary_ratio);
//      ai-toolkit extensions_built_in/diffusion_models/wan22/wan22_14b_model.py
//      (DualWanTransformer3DModel, boundary_ratio_t2v, scheduler_config shift 5)

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <filesystem>

#include "loom/model/wan/wan_model.h"
#include "loom/model/wan/wan_transformer.h"

namespace loom {

// The two experts under ai-toolkit's names (DualWanTransformer3DModel), so that a LoRA's module
// paths say which expert they are in: transformer_1 the high-noise expert, transformer_2 the
// low-noise one.
class Wan22ExpertsImpl : public torch::nn::Module {
  public:
    Wan22ExpertsImpl(WanTransformer3DModel high_noise, WanTransformer3DModel low_noise);
    WanTransformer3DModel transformer_1{nullptr};
    WanTransformer3DModel transformer_2{nullptr};
};
TORCH_MODULE(Wan22Experts);

struct Wan22Model {
    // ai-toolkit trains Wan 2.2 with FlowMatchEuler at shift 5 (wan22_5b_model.py's
    // scheduler_config, which the 14B model imports) and previews it with shift 3 as Wan 2.1.
    static constexpr double kTrainShift = 5.0;

    // The VAE, UMT5, its tokenizer and the preview scheduler; base.transformer is the
    // high-noise expert (experts->transformer_1).
    WanModel base;
    Wan22Experts experts{nullptr};
    double boundary_ratio = 0.875;

    // The boundary on the 0..1000 timestep scale.
    double boundary() const {
        return boundary_ratio * static_cast<double>(base.scheduler.num_train_timesteps);
    }
};

// Every component of a Wan 2.2 14B WanPipeline folder. Before anything is loaded: a folder
// without transformer_2 is refused as a Wan 2.1 folder, Wan 2.2's TI2V 5B (expand_timesteps, its
// own VAE) as not supported yet, a boundary_ratio outside (0, 1) and experts of different shapes
// as FormatErrors naming the file.
Wan22Model load_wan22(const std::filesystem::path& root, const WanLoadOptions& options = {});

}  // namespace loom
