#pragma once

// Wan 2.1's video transformer (text-to-video 1.3B and 14B differ only in sizes): the latent clip
// cut into 1x2x2 patches by a 3D convolution, blocks of self-attention with RoPE over
// (frame, row, column), cross-attention to UMT5's text and a gated-GELU feed-forward, each
// modulated by the timestep (a shared projection plus a learned table per block). Parameter
// names equal diffusers' state-dict keys ("blocks.3.attn1.to_q.weight",
// "condition_embedder.time_proj.weight").
//
// ref: diffusers models/transformers/transformer_wan.py::{WanTransformer3DModel,
//      WanTransformerBlock, WanAttention, WanAttnProcessor, WanRotaryPosEmbed,
//      WanTimeTextImageEmbedding}; models/normalization.py::FP32LayerNorm
//
// As the reference: the norms and the modulation are computed in float32 and the residual stream
// is cast back to the input's dtype after each step; q and k are RMS-normed across all heads
// before RoPE. Wan 2.1's image-to-video inputs (image_dim, added_kv_proj_dim) and Wan 2.2's
// per-token timesteps are not supported yet: read_wan_config and forward say so.

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>

#include <array>
#include <filesystem>
#include <utility>

#include "loom/model/nn/adaptable_layers.h"
#include "loom/model/nn/embeddings.h"

namespace loom {

struct WanConfig {
    std::array<int64_t, 3> patch_size = {1, 2, 2};  // frames, rows, columns
    int64_t num_attention_heads = 40;
    int64_t attention_head_dim = 128;
    int64_t in_channels = 16;
    int64_t out_channels = 16;
    int64_t text_dim = 4096;  // UMT5's d_model
    int64_t freq_dim = 256;   // the timestep's sinusoid channels
    int64_t ffn_dim = 13824;
    int64_t num_layers = 40;
    bool cross_attn_norm = true;  // norm2 (affine) before the cross-attention; else none
    double eps = 1e-6;
    int64_t rope_max_seq_len = 1024;  // positions per axis the reference's tables cover
    double rope_theta = 10000.0;
    int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
    // RoPE's split of a head: rows and columns 2 * (head_dim / 6) channels each, frames the rest.
    int64_t rope_hw_dim() const { return 2 * (attention_head_dim / 6); }
    int64_t rope_t_dim() const { return attention_head_dim - 2 * rope_hw_dim(); }
};

// The rotary tables of every patch position, frames slowest: cos and sin, [F*H*W, head_dim].
struct WanRope {
    at::Tensor cos;
    at::Tensor sin;
};
// For a clip of `frames` x `rows` x `columns` patches.
WanRope wan_rope(const WanConfig& config, int64_t frames, int64_t rows, int64_t columns,
                 const at::Device& device);

// Self- or cross-attention with RMS norms of q and k across all heads (WanAttention).
class WanAttentionImpl : public torch::nn::Module {
  public:
    WanAttentionImpl(int64_t dim, int64_t heads, double eps);
    // Self-attention with RoPE when `rope` is given; cross-attention to `context` otherwise.
    at::Tensor forward(const at::Tensor& x, const at::Tensor& context, const WanRope* rope);

  private:
    int64_t heads_;
    Linear to_q{nullptr}, to_k{nullptr}, to_v{nullptr}, to_out{nullptr};
    at::Tensor norm_q_weight, norm_k_weight;
    double eps_;
};
TORCH_MODULE(WanAttention);

class WanTransformerBlockImpl : public torch::nn::Module {
  public:
    explicit WanTransformerBlockImpl(const WanConfig& config);
    // x [B, S, dim]; context [B, T, dim] (embedded text); timestep_proj [B, 6, dim].
    at::Tensor forward(const at::Tensor& x, const at::Tensor& context,
                       const at::Tensor& timestep_proj, const WanRope& rope);

  private:
    WanConfig config_;
    WanAttention attn1{nullptr}, attn2{nullptr};
    at::Tensor norm2_weight, norm2_bias;  // cross_attn_norm only
    Linear ffn_in{nullptr}, ffn_out{nullptr};
    at::Tensor scale_shift_table;  // [1, 6, dim]
};
TORCH_MODULE(WanTransformerBlock);

class WanTransformer3DModelImpl : public torch::nn::Module {
  public:
    explicit WanTransformer3DModelImpl(const WanConfig& config);
    // hidden_states: the latent clip [B, C, F, H, W] (F, H, W multiples of the patch);
    // timestep: [B] in [0, 1000] as the scheduler gives it; encoder_hidden_states: UMT5's output
    // [B, T, text_dim]. Returns the flow-matching prediction, [B, out_channels, F, H, W].
    at::Tensor forward(const at::Tensor& hidden_states, const at::Tensor& timestep,
                       const at::Tensor& encoder_hidden_states);
    const WanConfig& config() const { return config_; }
    // Each block recomputed in backward instead of keeping its activations (model/nn/checkpoint.h).
    void set_gradient_checkpointing(bool on) { checkpointing_ = on; }
    bool gradient_checkpointing() const { return checkpointing_; }
    torch::nn::ModuleList& transformer_blocks() { return blocks; }

  private:
    WanConfig config_;
    bool checkpointing_ = false;
    torch::nn::Conv3d patch_embedding{nullptr};
    TimestepEmbedding time_embedder{nullptr};
    Linear time_proj{nullptr};
    Linear text_embedder_1{nullptr}, text_embedder_2{nullptr};
    torch::nn::ModuleList blocks{nullptr};
    Linear proj_out{nullptr};
    at::Tensor scale_shift_table;  // [1, 2, dim]
};
TORCH_MODULE(WanTransformer3DModel);

// A WanTransformer3DModel config.json (Wan 2.1 text-to-video; the image-to-video keys are
// refused as not supported yet).
WanConfig read_wan_config(const std::filesystem::path& config_json);

}  // namespace loom
