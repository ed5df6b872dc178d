#pragma once

// Qwen-Image's transformer (QwenImageTransformer2DModel, the 20B MMDiT of Qwen-Image and its Edit
// variants): 60 dual-stream blocks that are Flux.1's double-stream block under other names
// (flux/flux_transformer.h, DoubleBlockLayout::kQwenImage: img_mod / txt_mod, img_mlp / txt_mlp),
// no single-stream blocks; the text stream RMS-normed and projected from Qwen2.5-VL's width, the
// timestep alone as conditioning (no pooled text, no guidance embedding), the joint attention
// under the text's padding mask, and MSRoPE: image patches at (frame, row, column) with rows and
// columns centred on zero (scale_rope), the text tokens after the image's largest half-side on
// all three axes. Its input is Flux's packing of 16-channel latents (2x2 patches, 64 channels).
// Parameter names equal diffusers' state-dict keys.
//
// ref: diffusers models/transformers/transformer_qwenimage.py::{QwenImageTransformer2DModel,
//      QwenImageTransformerBlock, QwenDoubleStreamAttnProcessor2_0, QwenEmbedRope,
//      QwenTimestepProjEmbeddings} (zero_cond_t, use_additional_t_cond and the layered 3D RoPE
//      are not built: their configs are refused)

#include <torch/nn/modules/container/modulelist.h>

#include <cstdint>
#include <filesystem>
#include <utility>
#include <vector>

#include "loom/model/flux/flux_transformer.h"

namespace loom {

struct QwenImageConfig {
    FluxConfig blocks;  // in_channels 64, out_channels 16 x 4, num_layers 60, heads 24 x 128,
                        // joint_attention_dim 3584, axes_dims_rope (16, 56, 56)
    int64_t patch_size = 2;
};

struct QwenImageInputs {
    at::Tensor hidden_states;          // [B, S, in_channels] packed latents
    at::Tensor encoder_hidden_states;  // [B, T, joint_attention_dim] Qwen2.5-VL's hidden states
    at::Tensor encoder_hidden_states_mask;  // [B, T] 1 for a real token, or undefined: all
    at::Tensor timestep;                    // [B] in [0, 1] (sigma); x1000 inside
    int64_t height = 0;                     // the packed token grid: height x width tokens
    int64_t width = 0;
    // The Edit pipelines' control latents, packed after the image's tokens in hidden_states:
    // each one's (height, width) grid, the i-th at frame i + 1 of MSRoPE (img_shapes).
    std::vector<std::pair<int64_t, int64_t>> control_grids;
};

class QwenImageTransformer2DModelImpl : public torch::nn::Module {
  public:
    explicit QwenImageTransformer2DModelImpl(const QwenImageConfig& config);
    // The flow-matching velocity for the packed latents, [B, S, out_channels] over the whole
    // sequence (the image's tokens first, then the controls', as the reference returns it).
    at::Tensor forward(const QwenImageInputs& in);
    const QwenImageConfig& config() const { return config_; }
    void set_gradient_checkpointing(bool on) { checkpointing_ = on; }
    torch::nn::ModuleList& blocks() { return transformer_blocks; }

  private:
    QwenImageConfig config_;
    bool checkpointing_ = false;
    Linear img_in{nullptr}, txt_in{nullptr};
    at::Tensor txt_norm_;
    TimestepEmbedding timestep_embedder{nullptr};
    torch::nn::ModuleList transformer_blocks{nullptr};
    Linear norm_out_linear{nullptr}, proj_out{nullptr};
};
TORCH_MODULE(QwenImageTransformer2DModel);

// MSRoPE's tables for `text_tokens` text tokens followed by one-frame grids of patches, the
// i-th of `grids` (height, width) at frame i: cos and sin [T + S, head_dim] float32
// (QwenEmbedRope with scale_rope; the text after the grids' largest half-side).
FluxRope qwenimage_rope(int64_t text_tokens, const std::vector<std::pair<int64_t, int64_t>>& grids,
                        const std::vector<int64_t>& axes_dims, const at::Device& device);

// A QwenImageTransformer2DModel config.json; options loom does not build are FormatErrors
// naming the key.
QwenImageConfig read_qwenimage_config(const std::filesystem::path& config_json);
// A QwenImageTransformer2DModel folder (config.json and its weights) at `dtype`, in eval mode.
QwenImageTransformer2DModel load_qwenimage_transformer(const std::filesystem::path& dir,
                                                       at::ScalarType dtype = at::kFloat);

}  // namespace loom
