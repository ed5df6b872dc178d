#pragma once

// Qwen2.5-VL's vision tower (Qwen2_5_VisionTransformerPretrainedModel): what turns an image's
// patches (text/qwen2_vl_image_processor.h) into language-model tokens for Qwen-Image-Edit's
// text encoder. A linear patch embedding (the reference's Conv3d, whose stride is its kernel),
// pre-norm blocks of bidirectional attention — within 112-pixel windows, except the
// fullatt_block_indexes blocks, which attend over the whole image — with a 2D rotary embedding
// (rows on the first quarter of each head's frequencies' pairs, columns on the second) and a
// SwiGLU MLP with biases, then the merger: each merge_size x merge_size group of patches RMS-
// normed, concatenated and projected (Linear, GELU, Linear) to the language model's width.
// Patches are reordered window by window before the blocks and the merged tokens put back in
// the image's order after, as the reference does. Parameter names equal transformers' keys
// under "visual." ("blocks.0.attn.qkv.weight", "merger.mlp.0.weight").
//
// ref: transformers models/qwen2_5_vl/modeling_qwen2_5_vl.py::{
//      Qwen2_5_VisionTransformerPretrainedModel, Qwen2_5_VLVisionBlock,
//      Qwen2_5_VLVisionAttention, Qwen2_5_VLVisionRotaryEmbedding, Qwen2_5_VLPatchMerger};
//      vision_utils.py::{get_vision_position_ids, get_vision_window_index,
//      get_vision_cu_seqlens}

#include <torch/nn/modules/container/modulelist.h>

#include <cstdint>
#include <filesystem>
#include <vector>

#include "loom/model/nn/adaptable_layers.h"
#include "loom/model/text/qwen2_vl_image_processor.h"
#include "loom/model/text/t5_encoder.h"

namespace loom {

struct Qwen2_5_VisionConfig {
    int64_t depth = 32;
    int64_t hidden_size = 1280;
    int64_t intermediate_size = 3420;
    int64_t num_heads = 16;
    int64_t out_hidden_size = 3584;
    int64_t in_channels = 3;
    int64_t patch_size = 14;
    int64_t temporal_patch_size = 2;
    int64_t spatial_merge_size = 2;
    int64_t window_size = 112;
    std::vector<int64_t> fullatt_block_indexes = {7, 15, 23, 31};
    double rope_theta = 10000.0;
};

class Qwen2_5_VisionBlockImpl : public torch::nn::Module {
  public:
    explicit Qwen2_5_VisionBlockImpl(const Qwen2_5_VisionConfig& config);
    // x [N, hidden] (patches in window order); cos, sin [N, head_dim] float32; `segments`: the
    // lengths of the runs of patches that attend to each other.
    at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                       const std::vector<int64_t>& segments);

  private:
    int64_t heads_;
    T5LayerNorm norm1{nullptr}, norm2{nullptr};
    Linear qkv{nullptr}, proj{nullptr};
    Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(Qwen2_5_VisionBlock);

class Qwen2_5_VisionImpl : public torch::nn::Module {
  public:
    explicit Qwen2_5_VisionImpl(const Qwen2_5_VisionConfig& config);
    // The images' tokens, [sum of tokens(merge_size), out_hidden_size], image after image, each
    // in its processor order.
    at::Tensor forward(const std::vector<VisionPatches>& images);
    const Qwen2_5_VisionConfig& config() const { return config_; }

  private:
    Qwen2_5_VisionConfig config_;
    at::Tensor patch_weight_;  // patch_embed.proj.weight [hidden, C, T, P, P]
    torch::nn::ModuleList blocks{nullptr};
    T5LayerNorm ln_q{nullptr};
    Linear merger_fc1{nullptr}, merger_fc2{nullptr};
};
TORCH_MODULE(Qwen2_5_Vision);

// The vision_config of a Qwen2.5-VL config.json (transformers 4's or 5's keys); what loom does
// not build (another activation or rope type) is a FormatError naming the key.
Qwen2_5_VisionConfig read_qwen2_5_vision_config(const std::filesystem::path& config_json);

// The vision tower of a Qwen2_5_VLForConditionalGeneration folder: its weights under "visual." or
// "model.visual.", in `dtype`, in eval mode. A folder without them (a text-only export, as
// Qwen-Image's pipelines that drop the tower save) is a FormatError saying so.
Qwen2_5_Vision load_qwen2_5_vision(const std::filesystem::path& folder,
                                   at::ScalarType dtype = at::kFloat);

}  // namespace loom
