#pragma once

// ref: diffusers models/unets/unet_2d_blocks.py::{DownBlock2D, CrossAttnDownBlock2D,
// UNetMidBlock2DCrossAttn, UpBlock2D, CrossAttnUpBlock2D}. Each block optionally checkpoints its
// resnets (and its transformers checkpoint their blocks).

#include <torch/nn/modules/container/modulelist.h>

#include <optional>
#include <vector>

#include "loom/model/nn/attention.h"
#include "loom/model/nn/resnet.h"

namespace loom {

struct UNetBlockOptions {
    int64_t in_channels;
    int64_t out_channels;
    int64_t prev_output_channels = 0;  // up blocks: channels coming from the block below
    int64_t temb_channels;
    int64_t num_layers;
    bool has_cross_attention = false;
    int64_t transformer_layers = 1;
    int64_t heads = 1;  // number of attention heads (diffusers' config "attention_head_dim")
    int64_t cross_attention_dim = 768;
    bool use_linear_projection = false;
    int64_t groups = 32;
    double eps = 1e-5;
    bool add_sample_layer = false;  // a downsampler (down blocks) or an upsampler (up blocks)
    int64_t downsample_padding = 1;
    double output_scale_factor = 1.0;
};

// Down blocks return the block output and the skip states for the up path.
struct DownBlockOutput {
    at::Tensor hidden;
    std::vector<at::Tensor> skips;
};

class DownBlockImpl : public torch::nn::Module {
  public:
    explicit DownBlockImpl(const UNetBlockOptions& options);
    DownBlockOutput forward(const at::Tensor& x, const at::Tensor& temb, const at::Tensor& context);
    void set_gradient_checkpointing(bool on);
    std::size_t num_resnets() const { return resnets->size(); }

  private:
    torch::nn::ModuleList resnets{nullptr};
    torch::nn::ModuleList attentions{nullptr};  // empty for DownBlock2D
    torch::nn::ModuleList downsamplers{nullptr};
    bool checkpointing_ = false;
};
TORCH_MODULE(DownBlock);

class MidBlockCrossAttnImpl : public torch::nn::Module {
  public:
    explicit MidBlockCrossAttnImpl(const UNetBlockOptions& options);
    at::Tensor forward(const at::Tensor& x, const at::Tensor& temb, const at::Tensor& context);
    void set_gradient_checkpointing(bool on);

  private:
    torch::nn::ModuleList attentions{nullptr};
    torch::nn::ModuleList resnets{nullptr};
    bool checkpointing_ = false;
};
TORCH_MODULE(MidBlockCrossAttn);

class UpBlockImpl : public torch::nn::Module {
  public:
    explicit UpBlockImpl(const UNetBlockOptions& options);
    // `skips`: the skip states this block consumes, oldest first (it uses them from the back).
    at::Tensor forward(const at::Tensor& x, std::vector<at::Tensor> skips, const at::Tensor& temb,
                       const at::Tensor& context,
                       std::optional<std::vector<int64_t>> upsample_size = std::nullopt);
    void set_gradient_checkpointing(bool on);
    std::size_t num_resnets() const { return resnets->size(); }

  private:
    torch::nn::ModuleList resnets{nullptr};
    torch::nn::ModuleList attentions{nullptr};
    torch::nn::ModuleList upsamplers{nullptr};
    bool checkpointing_ = false;
};
TORCH_MODULE(UpBlock);

// A resnet call, checkpointed when `checkpointing` is set and grad is on.
at::Tensor run_resnet(ResnetBlock2DImpl& resnet, const at::Tensor& x, const at::Tensor& temb,
                      bool checkpointing);

}  // namespace loom
