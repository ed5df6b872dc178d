#pragma once

// ref: diffusers models/unets/unet_2d_condition.py::UNet2DConditionModel — the SD 1.x/2.x and
// SDXL denoiser, configured from its config.json. Parameter names equal diffusers' state-dict
// keys.

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/normalization.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "loom/model/nn/embeddings.h"
#include "loom/model/sd/unet_blocks.h"

namespace loom {

// The config.json keys loom implements (formats.md §2.1), already expanded per block.
struct UNetConfig {
    int64_t in_channels = 4;
    int64_t out_channels = 4;
    int64_t sample_size = 64;
    std::vector<std::string> down_block_types = {"CrossAttnDownBlock2D", "CrossAttnDownBlock2D",
                                                 "CrossAttnDownBlock2D", "DownBlock2D"};
    std::vector<std::string> up_block_types = {"UpBlock2D", "CrossAttnUpBlock2D",
                                               "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"};
    std::vector<int64_t> block_out_channels = {320, 640, 1280, 1280};
    std::vector<int64_t> layers_per_block = {2, 2, 2, 2};
    std::vector<int64_t> num_attention_heads = {8, 8, 8, 8};  // from "attention_head_dim"
    std::vector<int64_t> cross_attention_dim = {768, 768, 768, 768};
    std::vector<int64_t> transformer_layers_per_block = {1, 1, 1, 1};
    std::vector<int64_t> reverse_transformer_layers_per_block;  // empty: reverse of the above
    int64_t downsample_padding = 1;
    double mid_block_scale_factor = 1.0;
    int64_t norm_num_groups = 32;
    double norm_eps = 1e-5;
    bool use_linear_projection = false;
    bool flip_sin_to_cos = true;
    double freq_shift = 0.0;
    // SDXL: addition_embed_type "text_time" (pooled text embeds + micro-conditioning time ids).
    std::optional<std::string> addition_embed_type;
    int64_t addition_time_embed_dim = 256;
    int64_t projection_class_embeddings_input_dim = 2816;
};

class UNet2DConditionModelImpl : public torch::nn::Module {
  public:
    explicit UNet2DConditionModelImpl(const UNetConfig& config);

    // sample: [B, C_in, H, W]; timestep: [] or [B]; context: [B, M, cross_attention_dim];
    // text_embeds [B, pooled] and time_ids [B, 6] for SDXL. -> [B, C_out, H, W]
    at::Tensor forward(const at::Tensor& sample, const at::Tensor& timestep,
                       const at::Tensor& context, const at::Tensor& text_embeds = {},
                       const at::Tensor& time_ids = {});

    // Switchable at run time: the OOM ladder turns it on mid-run, between steps.
    void set_gradient_checkpointing(bool on);
    bool gradient_checkpointing() const { return checkpointing_; }
    // Channels-last convolutions inside, the standard layout at the edges
    // (model/nn/memory_format.h). Converts the conv weights where they live: call it before placing
    // the model.
    void set_channels_last(bool on);
    bool channels_last() const { return channels_last_; }
    const UNetConfig& config() const { return config_; }

  private:
    UNetConfig config_;
    Conv2d conv_in{nullptr};
    TimestepEmbedding time_embedding{nullptr};
    TimestepEmbedding add_embedding{nullptr};
    torch::nn::ModuleList down_blocks{nullptr};
    MidBlockCrossAttn mid_block{nullptr};
    torch::nn::ModuleList up_blocks{nullptr};
    torch::nn::GroupNorm conv_norm_out{nullptr};
    Conv2d conv_out{nullptr};
    int64_t num_upsamplers_ = 0;
    bool checkpointing_ = false;
    bool channels_last_ = false;
};
TORCH_MODULE(UNet2DConditionModel);

// A UNet2DConditionModel config.json (unsupported options are FormatErrors naming the key, never
// silently dropped).
UNetConfig read_unet_config(const std::filesystem::path& config_json);

}  // namespace loom
