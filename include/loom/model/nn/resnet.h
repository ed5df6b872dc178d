#pragma once

// ref: diffusers models/resnet.py::ResnetBlock2D, models/downsampling.py::Downsample2D,
// models/upsampling.py::Upsample2D. Parameter names equal the diffusers state-dict keys.

#include <torch/nn/modules/normalization.h>

#include <optional>
#include <vector>

#include "loom/model/nn/adaptable_layers.h"

namespace loom {

struct ResnetBlock2DOptions {
    int64_t in_channels;
    int64_t out_channels;
    std::optional<int64_t> temb_channels;  // none in the VAE
    int64_t groups = 32;
    double eps = 1e-5;
    double output_scale_factor = 1.0;
};

class ResnetBlock2DImpl : public torch::nn::Module {
  public:
    explicit ResnetBlock2DImpl(const ResnetBlock2DOptions& options);
    // x: [B, C_in, H, W], temb: [B, temb_channels] or undefined -> [B, C_out, H, W]
    at::Tensor forward(const at::Tensor& x, const at::Tensor& temb = {});

  private:
    torch::nn::GroupNorm norm1{nullptr};
    Conv2d conv1{nullptr};
    Linear time_emb_proj{nullptr};
    torch::nn::GroupNorm norm2{nullptr};
    Conv2d conv2{nullptr};
    Conv2d conv_shortcut{nullptr};  // 1x1, when in_channels != out_channels
    double output_scale_factor_;
};
TORCH_MODULE(ResnetBlock2D);

// 3x3 stride-2 convolution; padding 0 pads (0, 1, 0, 1) first, as diffusers does.
class Downsample2DImpl : public torch::nn::Module {
  public:
    Downsample2DImpl(int64_t channels, int64_t padding);
    at::Tensor forward(const at::Tensor& x);

  private:
    Conv2d conv{nullptr};
    int64_t padding_;
};
TORCH_MODULE(Downsample2D);

// Nearest-neighbour x2 (or to `size`) then a 3x3 convolution.
class Upsample2DImpl : public torch::nn::Module {
  public:
    explicit Upsample2DImpl(int64_t channels);
    at::Tensor forward(const at::Tensor& x,
                       std::optional<std::vector<int64_t>> size = std::nullopt);

  private:
    Conv2d conv{nullptr};
};
TORCH_MODULE(Upsample2D);

}  // namespace loom
