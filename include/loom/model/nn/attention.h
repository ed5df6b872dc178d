#pragma once

// ref: diffusers models/attention_processor.py::Attention (AttnProcessor2_0),
// models/attention.py::{GEGLU, FeedForward, BasicTransformerBlock},
// models/transformers/transformer_2d.py::Transformer2DModel (continuous input).

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/normalization.h>

#include <optional>

#include "loom/model/nn/adaptable_layers.h"

namespace loom {

struct AttentionOptions {
    int64_t query_dim = 0;
    std::optional<int64_t> cross_attention_dim;  // keys/values come from encoder states
    int64_t heads = 8;
    int64_t dim_head = 64;
    bool bias = false;  // q/k/v projections
    bool out_bias = true;
    // VAE-style spatial attention: a GroupNorm on the input and a residual connection.
    std::optional<int64_t> norm_num_groups;
    double norm_eps = 1e-5;
    bool residual_connection = false;
    double rescale_output_factor = 1.0;
};

class AttentionImpl : public torch::nn::Module {
  public:
    explicit AttentionImpl(const AttentionOptions& options);
    // x: [B, N, query_dim] (or [B, C, H, W] for spatial attention); context: [B, M, cross_dim]
    at::Tensor forward(const at::Tensor& x, const at::Tensor& context = {});

  private:
    torch::nn::GroupNorm group_norm{nullptr};
    Linear to_q{nullptr};
    Linear to_k{nullptr};
    Linear to_v{nullptr};
    torch::nn::ModuleList to_out{nullptr};  // [Linear]
    AttentionOptions options_;
};
TORCH_MODULE(Attention);

// Linear(dim, 2*inner) split into value and gate; value * gelu(gate).
class GEGLUImpl : public torch::nn::Module {
  public:
    GEGLUImpl(int64_t dim_in, int64_t dim_out);
    at::Tensor forward(const at::Tensor& x);

  private:
    Linear proj{nullptr};
};
TORCH_MODULE(GEGLU);

class FeedForwardImpl : public torch::nn::Module {
  public:
    FeedForwardImpl(int64_t dim, int64_t mult = 4);
    at::Tensor forward(const at::Tensor& x);

  private:
    torch::nn::ModuleList net{nullptr};  // [GEGLU, Dropout(0), Linear]
};
TORCH_MODULE(FeedForward);

class BasicTransformerBlockImpl : public torch::nn::Module {
  public:
    BasicTransformerBlockImpl(int64_t dim, int64_t heads, int64_t dim_head,
                              int64_t cross_attention_dim);
    // x: [B, N, dim], context: [B, M, cross_attention_dim]
    at::Tensor forward(const at::Tensor& x, const at::Tensor& context);

  private:
    torch::nn::LayerNorm norm1{nullptr};
    Attention attn1{nullptr};
    torch::nn::LayerNorm norm2{nullptr};
    Attention attn2{nullptr};
    torch::nn::LayerNorm norm3{nullptr};
    FeedForward ff{nullptr};
};
TORCH_MODULE(BasicTransformerBlock);

struct Transformer2DOptions {
    int64_t in_channels;
    int64_t heads;
    int64_t dim_head;
    int64_t num_layers = 1;
    int64_t cross_attention_dim;
    int64_t norm_num_groups = 32;
    bool use_linear_projection = false;
};

class Transformer2DModelImpl : public torch::nn::Module {
  public:
    explicit Transformer2DModelImpl(const Transformer2DOptions& options);
    // x: [B, C, H, W], context: [B, M, cross_attention_dim] -> [B, C, H, W]
    at::Tensor forward(const at::Tensor& x, const at::Tensor& context);
    void set_gradient_checkpointing(bool on) { checkpointing_ = on; }

  private:
    torch::nn::GroupNorm norm{nullptr};
    std::shared_ptr<torch::nn::Module> proj_in;  // Conv2d 1x1 or Linear
    torch::nn::ModuleList transformer_blocks{nullptr};
    std::shared_ptr<torch::nn::Module> proj_out;  // Conv2d 1x1 or Linear
    bool linear_projection_;
    bool checkpointing_ = false;
};
TORCH_MODULE(Transformer2DModel);

}  // namespace loom
