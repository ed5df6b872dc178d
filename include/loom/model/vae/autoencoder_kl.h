#pragma once

// ref: diffusers models/autoencoders/autoencoder_kl.py::AutoencoderKL and
// models/autoencoders/vae.py::{Encoder, Decoder}, with unet_2d_blocks.py::{DownEncoderBlock2D,
// UpDecoderBlock2D, UNetMidBlock2D}. Parameter names equal diffusers' state-dict keys.

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/normalization.h>

#include <filesystem>
#include <optional>
#include <vector>

#include "loom/model/nn/attention.h"
#include "loom/model/nn/resnet.h"

namespace loom {

struct VAEConfig {
    int64_t in_channels = 3;
    int64_t out_channels = 3;
    std::vector<int64_t> block_out_channels = {64};
    int64_t layers_per_block = 1;
    int64_t latent_channels = 4;
    int64_t norm_num_groups = 32;
    int64_t sample_size = 32;
    double scaling_factor = 0.18215;
    std::optional<double> shift_factor;
    bool use_quant_conv = true;
    bool use_post_quant_conv = true;
    bool mid_block_add_attention = true;
};

// resnet -> [attention -> resnet], no time embedding.
class VAEMidBlockImpl : public torch::nn::Module {
  public:
    VAEMidBlockImpl(int64_t channels, int64_t groups, bool add_attention);
    at::Tensor forward(const at::Tensor& x);

  private:
    torch::nn::ModuleList attentions{nullptr};
    torch::nn::ModuleList resnets{nullptr};
};
TORCH_MODULE(VAEMidBlock);

// ref: DownEncoderBlock2D — resnets, then a stride-2 conv (padding 0) except in the last block.
class VAEDownBlockImpl : public torch::nn::Module {
  public:
    VAEDownBlockImpl(int64_t in, int64_t out, int64_t layers, int64_t groups, bool downsample);
    at::Tensor forward(const at::Tensor& x);

  private:
    torch::nn::ModuleList resnets{nullptr};
    torch::nn::ModuleList downsamplers{nullptr};
};
TORCH_MODULE(VAEDownBlock);

// ref: UpDecoderBlock2D — resnets, then an upsampler except in the last block.
class VAEUpBlockImpl : public torch::nn::Module {
  public:
    VAEUpBlockImpl(int64_t in, int64_t out, int64_t layers, int64_t groups, bool upsample);
    at::Tensor forward(const at::Tensor& x);

  private:
    torch::nn::ModuleList resnets{nullptr};
    torch::nn::ModuleList upsamplers{nullptr};
};
TORCH_MODULE(VAEUpBlock);

class VAEEncoderImpl : public torch::nn::Module {
  public:
    explicit VAEEncoderImpl(const VAEConfig& config);
    at::Tensor forward(const at::Tensor& x);  // [B, 3, H, W] -> [B, 2*latent, H/f, W/f]

  private:
    Conv2d conv_in{nullptr};
    torch::nn::ModuleList down_blocks{nullptr};
    VAEMidBlock mid_block{nullptr};
    torch::nn::GroupNorm conv_norm_out{nullptr};
    Conv2d conv_out{nullptr};
};
TORCH_MODULE(VAEEncoder);

class VAEDecoderImpl : public torch::nn::Module {
  public:
    explicit VAEDecoderImpl(const VAEConfig& config);
    at::Tensor forward(const at::Tensor& z);  // [B, latent, h, w] -> [B, 3, h*f, w*f]

  private:
    Conv2d conv_in{nullptr};
    VAEMidBlock mid_block{nullptr};
    torch::nn::ModuleList up_blocks{nullptr};
    torch::nn::GroupNorm conv_norm_out{nullptr};
    Conv2d conv_out{nullptr};
};
TORCH_MODULE(VAEDecoder);

// The latent distribution encode() returns.
struct LatentDistribution {
    at::Tensor mean;    // [B, latent, h, w]
    at::Tensor logvar;  // clamped to [-30, 20] as diffusers does
    at::Tensor sample(const std::optional<at::Generator>& generator = std::nullopt) const;
};

class AutoencoderKLImpl : public torch::nn::Module {
  public:
    explicit AutoencoderKLImpl(const VAEConfig& config);
    LatentDistribution encode(const at::Tensor& image);  // image in [-1, 1]
    at::Tensor decode(const at::Tensor& latents);        // unscaled latents -> image
    const VAEConfig& config() const { return config_; }
    // Pixels per latent cell: 2^(number of blocks - 1).
    int64_t scale_factor() const;
    // Channels-last convolutions inside encode and decode, the standard layout at the edges
    // (model/nn/memory_format.h). Converts the conv weights where they live: call it before
    // placing.
    void set_channels_last(bool on);

  private:
    VAEConfig config_;
    bool channels_last_ = false;
    VAEEncoder encoder{nullptr};
    VAEDecoder decoder{nullptr};
    Conv2d quant_conv{nullptr};
    Conv2d post_quant_conv{nullptr};
};
TORCH_MODULE(AutoencoderKL);

// The latents an SD or Flux model trains on from a raw VAE sample: (z - shift_factor) *
// scaling_factor (no shift for SD).
at::Tensor scaled_latents(const VAEConfig& config, const at::Tensor& z);

// An AutoencoderKL config.json (unsupported options are FormatErrors naming the key).
VAEConfig read_vae_config(const std::filesystem::path& config_json);

struct DiffusersFolder;
// The folder's "vae" component (AutoencoderKL) from its config.json with its weights, in `dtype`,
// in eval mode.
AutoencoderKL load_vae(const DiffusersFolder& folder, at::ScalarType dtype = at::kFloat);

}  // namespace loom
