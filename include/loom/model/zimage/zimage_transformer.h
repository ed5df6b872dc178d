#pragma once

// Z-Image's transformer: a single-stream DiT. The image's 2x2 patches go through noise-refiner
// blocks (timestep-modulated) and the caption's tokens through context-refiner blocks
// (unmodulated), each padded to a multiple of 32 tokens with a learned pad token; then the
// image tokens followed by the caption tokens run through the main blocks as one sequence,
// under a 3-axis rotary embedding (caption tokens at (1 + k, 0, 0), image patches at
// (caption length + 1, row, column), pad tokens at the origin). Each item of a batch keeps its
// own caption length: padding to the batch is masked out of attention. Every block: q/k
// RMSNorm attention and a SwiGLU feed-forward, each sandwiched between two RMSNorms, tanh gates.
// Parameter names equal diffusers' state-dict keys.
//
// ref: diffusers models/transformers/transformer_z_image.py::{ZImageTransformer2DModel,
//      ZImageTransformerBlock, ZSingleStreamAttnProcessor, FinalLayer, RopeEmbedder,
//      TimestepEmbedder} (the basic mode; the Omni variant's SigLIP inputs are not built)

#include <torch/nn/modules/container/modulelist.h>

#include <cstdint>
#include <filesystem>
#include <vector>

#include "loom/model/nn/adaptable_layers.h"

namespace loom {

struct ZImageConfig {
    int64_t patch_size = 2;    // all_patch_size: one entry
    int64_t f_patch_size = 1;  // all_f_patch_size: one entry
    int64_t in_channels = 16;
    int64_t dim = 3840;
    int64_t n_layers = 30;
    int64_t n_refiner_layers = 2;
    int64_t n_heads = 30;
    double norm_eps = 1e-5;
    bool qk_norm = true;
    int64_t cap_feat_dim = 2560;
    double rope_theta = 256.0;
    double t_scale = 1000.0;
    std::vector<int64_t> axes_dims = {32, 48, 48};
    std::vector<int64_t> axes_lens = {1024, 512, 512};

    int64_t head_dim() const { return dim / n_heads; }
    int64_t adaln_dim() const { return dim < 256 ? dim : 256; }
    int64_t patch_features() const { return f_patch_size * patch_size * patch_size * in_channels; }
};

// ZImageTransformerBlock: attention and feed-forward, modulated by the timestep or not.
class ZImageTransformerBlockImpl : public torch::nn::Module {
  public:
    ZImageTransformerBlockImpl(const ZImageConfig& c, bool modulation);
    // x [B, S, dim]; cos, sin [B, S, head_dim] float32; bias [B, 1, 1, S] (0 or -inf) or
    // undefined; adaln [B, adaln_dim] (a modulated block) or undefined.
    at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                       const at::Tensor& bias, const at::Tensor& adaln);

  private:
    at::Tensor attention(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                         const at::Tensor& bias);
    at::Tensor feed_forward(const at::Tensor& x);

    int64_t heads_;
    double eps_;
    bool modulation_;
    Linear to_q{nullptr}, to_k{nullptr}, to_v{nullptr}, to_out{nullptr};
    at::Tensor norm_q_, norm_k_;  // undefined without qk_norm
    Linear w1{nullptr}, w2{nullptr}, w3{nullptr};
    at::Tensor attention_norm1_, attention_norm2_, ffn_norm1_, ffn_norm2_;
    Linear adaln_modulation{nullptr};
};
TORCH_MODULE(ZImageTransformerBlock);

struct ZImageInputs {
    at::Tensor latents;  // [B, in_channels, H, W]
    // [B, T, cap_feat_dim]: item b's caption is its first caption_lengths[b] rows (the
    // pipeline's embeddings of the real tokens); the rest is never read.
    at::Tensor captions;
    std::vector<int64_t> caption_lengths;
    at::Tensor timestep;  // [B]: (1000 - t) / 1000 as the pipeline passes it; x t_scale inside
};

class ZImageTransformer2DModelImpl : public torch::nn::Module {
  public:
    explicit ZImageTransformer2DModelImpl(const ZImageConfig& config);
    // The model's output for the latents, [B, in_channels, H, W] (the pipeline negates it).
    at::Tensor forward(const ZImageInputs& in);
    const ZImageConfig& config() const { return config_; }
    void set_gradient_checkpointing(bool on) { checkpointing_ = on; }
    torch::nn::ModuleList& main_blocks() { return layers; }

  private:
    // The blocks of `list` over x, under the rotary tables and the key bias, checkpointed.
    at::Tensor run_blocks(torch::nn::ModuleList& list, at::Tensor x, const at::Tensor& cos,
                          const at::Tensor& sin, const at::Tensor& bias, const at::Tensor& adaln);

    ZImageConfig config_;
    bool checkpointing_ = false;
    Linear x_embedder{nullptr};
    Linear t_linear_1{nullptr}, t_linear_2{nullptr};
    at::Tensor cap_norm_;
    Linear cap_linear{nullptr};
    at::Tensor x_pad_token_, cap_pad_token_;
    torch::nn::ModuleList noise_refiner{nullptr};
    torch::nn::ModuleList context_refiner{nullptr};
    torch::nn::ModuleList layers{nullptr};
    Linear final_linear{nullptr}, final_adaln{nullptr};
};
TORCH_MODULE(ZImageTransformer2DModel);

// A ZImageTransformer2DModel config.json. Options loom does not build (SigLIP inputs, several
// patch sizes) are FormatErrors naming the key.
ZImageConfig read_zimage_config(const std::filesystem::path& config_json);
// A ZImageTransformer2DModel folder (config.json and its weights) at `dtype`, in eval mode.
ZImageTransformer2DModel load_zimage_transformer(const std::filesystem::path& dir,
                                                 at::ScalarType dtype = at::kFloat);

}  // namespace loom
