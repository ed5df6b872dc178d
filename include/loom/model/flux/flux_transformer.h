#pragma once

// Flux.1's transformer (dev with the guidance embedding, schnell without): double-stream blocks
// (text and image with their own weights, one joint attention), then single-stream blocks over the
// concatenated sequence; RoPE over (text, height, width) position ids; adaLN-Zero modulation from
// timestep + pooled CLIP text (+ guidance). Parameter names equal diffusers' state-dict keys
// ("transformer_blocks.0.attn.to_q.weight", "single_transformer_blocks.3.proj_mlp.weight").
//
// ref: diffusers models/transformers/transformer_flux.py::{FluxTransformer2DModel,
//      FluxTransformerBlock, FluxSingleTransformerBlock, FluxAttention, FluxAttnProcessor,
//      FluxPosEmbed}; models/normalization.py::{AdaLayerNormZero, AdaLayerNormZeroSingle,
//      AdaLayerNormContinuous};
//      models/embeddings.py::{CombinedTimestep(Guidance)TextProjEmbeddings,
//      PixArtAlphaTextProjection, get_1d_rotary_pos_embed, apply_rotary_emb}
//
// The latents the transformer sees are "packed": the VAE's [B, C, H, W] latents cut into 2x2
// patches, [B, (H/2)(W/2), 4C] (flux_pack_latents). float16's clip of the residual stream is not
// done: run Flux in float32 or bfloat16.

#include <torch/nn/modules/container/modulelist.h>

#include <filesystem>
#include <tuple>
#include <vector>

#include "loom/model/nn/adaptable_layers.h"
#include "loom/model/nn/embeddings.h"

namespace loom {

struct FluxConfig {
    int64_t in_channels = 64;  // 4 x the VAE's latent channels
    int64_t out_channels = 64;
    int64_t num_layers = 19;         // double-stream blocks
    int64_t num_single_layers = 38;  // single-stream blocks
    int64_t attention_head_dim = 128;
    int64_t num_attention_heads = 24;
    int64_t joint_attention_dim = 4096;                  // T5's d_model
    int64_t pooled_projection_dim = 768;                 // CLIP-L's pooled output
    bool guidance_embeds = true;                         // dev: true; schnell: false
    std::vector<int64_t> axes_dims_rope = {16, 56, 56};  // sums to attention_head_dim
    double rope_theta = 10000.0;
    int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
};

// RMS norm with a weight over the last dimension (torch.nn.RMSNorm as Flux's q/k norms use it).
class FluxRMSNormImpl : public torch::nn::Module {
  public:
    FluxRMSNormImpl(int64_t dim, double eps);
    at::Tensor forward(const at::Tensor& x);

  private:
    at::Tensor weight;
    double eps_;
};
TORCH_MODULE(FluxRMSNorm);

// One stream's query/key/value projections with their per-head RMS norms, registered on an
// attention module under the names of that stream ("to_q", "norm_q", ... for the image stream,
// "add_q_proj", "norm_added_q", ... for the text stream of a double block).
struct FluxQKV {
    struct Names {
        const char* q;
        const char* k;
        const char* v;
        const char* norm_q;
        const char* norm_k;
    };
    static constexpr Names kImage{"to_q", "to_k", "to_v", "norm_q", "norm_k"};
    static constexpr Names kText{"add_q_proj", "add_k_proj", "add_v_proj", "norm_added_q",
                                 "norm_added_k"};

    FluxQKV() = default;
    FluxQKV(torch::nn::Module& attention, int64_t dim, int64_t head_dim, const Names& names);
    // [B, S, dim] -> q, k (normed) and v as [B, S, heads, head_dim].
    std::tuple<at::Tensor, at::Tensor, at::Tensor> operator()(const at::Tensor& x);

    int64_t head_dim = 0;
    Linear q{nullptr}, k{nullptr}, v{nullptr};
    FluxRMSNorm norm_q{nullptr}, norm_k{nullptr};
};

// The rotary embedding's cos and sin, [S, head_dim] float32 each.
struct FluxRope {
    at::Tensor cos;
    at::Tensor sin;
};

// ids: [S, n_axes] positions (text ids first, then image ids) -> per-axis frequencies computed in
// float64 as the reference does, interleaved, concatenated over the axes.
FluxRope flux_rope(const at::Tensor& ids, const std::vector<int64_t>& axes_dim, double theta);

// A block's adaLN-Zero vectors, each [B, inner]: shift, scale, gate (and for a double-stream
// block's stream, shift, scale, gate of its feed-forward after them).
using FluxModulation = std::vector<at::Tensor>;

// Which modules a double-stream block has and what they are called: Flux's (norm1.linear,
// norm1_context.linear, ff, ff_context), Chroma's pruned one (no modulation Linears: the caller
// hands the vectors in), or Qwen-Image's (img_mod.1, txt_mod.1, img_mlp, txt_mlp) — the same
// computation under other names.
enum class DoubleBlockLayout { kFlux, kPruned, kQwenImage };

class FluxTransformerBlockImpl : public torch::nn::Module {
  public:
    explicit FluxTransformerBlockImpl(const FluxConfig& config,
                                      DoubleBlockLayout layout = DoubleBlockLayout::kFlux);
    // Returns {context, hidden}: the text and image streams after the block; `bias` is added to
    // the joint attention's scores (broadcast to [B, 1, T + S, T + S]; undefined: none).
    std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& hidden, const at::Tensor& context,
                                              const at::Tensor& temb, const FluxRope& rope,
                                              const at::Tensor& bias = {});
    // The block with its six image and six text vectors given; `bias` is added to the joint
    // attention's scores ([B, 1, T + S, T + S], or undefined).
    std::pair<at::Tensor, at::Tensor> forward_modulated(
        const at::Tensor& hidden, const at::Tensor& context, const FluxModulation& image,
        const FluxModulation& text, const FluxRope& rope, const at::Tensor& bias);

  private:
    Linear norm1_linear{nullptr}, norm1_context_linear{nullptr};
    FluxQKV image_qkv_, text_qkv_;
    Linear to_out{nullptr}, to_add_out{nullptr};
    Linear ff_in{nullptr}, ff_out{nullptr}, ff_context_in{nullptr}, ff_context_out{nullptr};
};
TORCH_MODULE(FluxTransformerBlock);

class FluxSingleTransformerBlockImpl : public torch::nn::Module {
  public:
    explicit FluxSingleTransformerBlockImpl(const FluxConfig& config,
                                            bool modulation_linears = true);
    // x: the joint sequence [B, T + S, inner] (text first).
    at::Tensor forward(const at::Tensor& x, const at::Tensor& temb, const FluxRope& rope);
    // With its three vectors given and `bias` added to the attention's scores (or undefined).
    at::Tensor forward_modulated(const at::Tensor& x, const FluxModulation& modulation,
                                 const FluxRope& rope, const at::Tensor& bias);

  private:
    Linear norm_linear{nullptr};
    FluxQKV qkv_;
    Linear proj_mlp{nullptr}, proj_out{nullptr};
};
TORCH_MODULE(FluxSingleTransformerBlock);

struct FluxInputs {
    at::Tensor hidden_states;          // [B, S, in_channels] packed latents
    at::Tensor encoder_hidden_states;  // [B, T, joint_attention_dim] T5 output
    at::Tensor pooled_projections;     // [B, pooled_projection_dim] CLIP pooled output
    at::Tensor timestep;               // [B] in [0, 1] (sigma); x1000 inside, as the reference
    at::Tensor img_ids;                // [S, 3]
    at::Tensor txt_ids;                // [T, 3]
    at::Tensor guidance;               // [B] guidance scale (dev); undefined for schnell
    // dev without its guidance embedding: the conditioning is the timestep's and the pooled
    // text's embeddings only (ai-toolkit's guidance_embed_bypass_forward); guidance unused.
    bool bypass_guidance_embedding = false;
};

class FluxTransformer2DModelImpl : public torch::nn::Module {
  public:
    explicit FluxTransformer2DModelImpl(const FluxConfig& config);
    // The prediction (flow-matching velocity) for the packed latents: [B, S, out_channels].
    at::Tensor forward(const FluxInputs& in);
    const FluxConfig& config() const { return config_; }
    // Each double- and single-stream block recomputed in backward instead of keeping its
    // activations (model/nn/checkpoint.h), as diffusers' gradient checkpointing does per block.
    void set_gradient_checkpointing(bool on) { checkpointing_ = on; }
    bool gradient_checkpointing() const { return checkpointing_; }
    torch::nn::ModuleList& double_blocks() { return transformer_blocks; }
    torch::nn::ModuleList& single_blocks() { return single_transformer_blocks; }

  private:
    // flux_rope of `ids`, kept while the ids repeat.
    const FluxRope& rope_for(const at::Tensor& ids);

    FluxConfig config_;
    bool checkpointing_ = false;
    at::Tensor rope_ids_;
    FluxRope rope_;
    Linear x_embedder{nullptr}, context_embedder{nullptr};
    TimestepEmbedding timestep_embedder{nullptr}, guidance_embedder{nullptr};
    Linear text_embedder_1{nullptr}, text_embedder_2{nullptr};
    torch::nn::ModuleList transformer_blocks{nullptr};
    torch::nn::ModuleList single_transformer_blocks{nullptr};
    Linear norm_out_linear{nullptr}, proj_out{nullptr};
};
TORCH_MODULE(FluxTransformer2DModel);

// [B, C, H, W] (H, W even) -> [B, (H/2)(W/2), 4C], diffusers' FluxPipeline._pack_latents.
at::Tensor flux_pack_latents(const at::Tensor& latents);
// The inverse, for latents of `height` x `width` (in latent pixels).
at::Tensor flux_unpack_latents(const at::Tensor& packed, int64_t height, int64_t width);
// [(H/2)(W/2), 3] ids (0, row, column) of packed latents, FluxPipeline._prepare_latent_image_ids.
at::Tensor flux_image_ids(int64_t height, int64_t width, const at::TensorOptions& options);
// Kontext's control tokens: flux_image_ids with the first axis 1, so attention tells the
// control's patches from the target's at the same position (FluxKontextPipeline.prepare_latents).
at::Tensor flux_control_ids(int64_t height, int64_t width, const at::TensorOptions& options);
// [T, 3] zeros: the text tokens' ids.
at::Tensor flux_text_ids(int64_t tokens, const at::TensorOptions& options);

// A FluxTransformer2DModel config.json (patch_size 1 only: Flux.1 dev and schnell).
FluxConfig read_flux_config(const std::filesystem::path& config_json);

}  // namespace loom
