#pragma once

// Chroma's transformer: Flux.1's double- and single-stream blocks without their modulation
// Linears (model/flux/flux_transformer.h: DoubleBlockLayout::kPruned, single blocks built with
// modulation_linears = false), every block's
// adaLN vectors coming instead from one "distilled guidance" approximator: an MLP over
// sinusoids of (timestep, guidance 0, the vector's index), one output row per vector. No pooled
// text input (no CLIP). The joint attention takes ChromaPipeline's attention mask, which — a
// float tensor in the reference — is added to the scores as a bias (mask_i x mask_j), not used
// as a boolean mask. Parameter names equal diffusers' state-dict keys.
//
// ref: diffusers models/transformers/transformer_chroma.py::{ChromaTransformer2DModel,
//      ChromaApproximator, ChromaCombinedTimestepTextProjEmbeddings,
//      ChromaAdaLayerNorm*Pruned}; pipelines/chroma/pipeline_chroma.py (the mask)

#include <torch/nn/modules/container/modulelist.h>

#include <filesystem>

#include "loom/model/flux/flux_transformer.h"

namespace loom {

struct ChromaConfig {
    FluxConfig flux;  // pooled_projection_dim and guidance_embeds unused
    int64_t approximator_num_channels = 64;
    int64_t approximator_hidden_dim = 5120;
    int64_t approximator_layers = 5;
    // Rows of the approximator's output: 3 per single block, 6 + 6 per double block, 2 for the
    // output norm.
    int64_t modulation_count() const {
        return 3 * flux.num_single_layers + 2 * 6 * flux.num_layers + 2;
    }
};

// ChromaApproximator: in_proj, then residual (RMSNorm -> Linear, SiLU, Linear) layers, out_proj.
class ChromaApproximatorImpl : public torch::nn::Module {
  public:
    ChromaApproximatorImpl(int64_t in_dim, int64_t out_dim, int64_t hidden_dim, int64_t layers);
    at::Tensor forward(const at::Tensor& x);

  private:
    Linear in_proj{nullptr}, out_proj{nullptr};
    std::vector<Linear> linear_1_, linear_2_;
    std::vector<at::Tensor> norm_weights_;
};
TORCH_MODULE(ChromaApproximator);

struct ChromaInputs {
    at::Tensor hidden_states;          // [B, S, in_channels] packed latents
    at::Tensor encoder_hidden_states;  // [B, T, joint_attention_dim] T5 output
    at::Tensor timestep;               // [B] in [0, 1] (sigma); x1000 inside, as the reference
    at::Tensor img_ids;                // [S, 3]
    at::Tensor txt_ids;                // [T, 3]
    at::Tensor attention_mask;         // [B, T + S] (text first), or undefined: no bias
};

class ChromaTransformer2DModelImpl : public torch::nn::Module {
  public:
    explicit ChromaTransformer2DModelImpl(const ChromaConfig& config);
    // The flow-matching velocity for the packed latents: [B, S, out_channels].
    at::Tensor forward(const ChromaInputs& in);
    const ChromaConfig& config() const { return config_; }
    void set_gradient_checkpointing(bool on) { checkpointing_ = on; }
    bool gradient_checkpointing() const { return checkpointing_; }
    torch::nn::ModuleList& double_blocks() { return transformer_blocks; }
    torch::nn::ModuleList& single_blocks() { return single_transformer_blocks; }

  private:
    // ChromaCombinedTimestepTextProjEmbeddings: [B, modulation_count, approximator channels].
    at::Tensor approximator_input(const at::Tensor& timestep) const;

    ChromaConfig config_;
    bool checkpointing_ = false;
    at::Tensor mod_proj_;  // the vectors' index sinusoids, a non-persistent buffer
    Linear x_embedder{nullptr}, context_embedder{nullptr};
    ChromaApproximator distilled_guidance_layer{nullptr};
    torch::nn::ModuleList transformer_blocks{nullptr};
    torch::nn::ModuleList single_transformer_blocks{nullptr};
    Linear proj_out{nullptr};
};
TORCH_MODULE(ChromaTransformer2DModel);

// A ChromaTransformer2DModel config.json (patch_size 1).
ChromaConfig read_chroma_config(const std::filesystem::path& config_json);
// A ChromaTransformer2DModel folder (config.json and its weights) at `dtype`, in eval mode.
ChromaTransformer2DModel load_chroma_transformer(const std::filesystem::path& dir,
                                                 at::ScalarType dtype = at::kFloat);

}  // namespace loom
