#pragma once

// Wan 2.1's video VAE: causal 3D convolutions that compress a clip 4x in time and 8x in space
// to 16 latent channels. Frame 0 is encoded alone (an image is a one-frame clip), then each
// further 4 frames become one latent frame; the decoder turns latent frame 0 into one frame and
// each later one into 4. Parameter names equal diffusers' state-dict keys
// ("encoder.down_blocks.2.resample.1.weight", "decoder.up_blocks.0.upsamplers.0.time_conv.bias").
//
// ref: diffusers models/autoencoders/autoencoder_kl_wan.py::{AutoencoderKLWan, WanEncoder3d,
//      WanDecoder3d, WanResidualBlock, WanAttentionBlock, WanResample, WanCausalConv3d,
//      WanRMS_norm}; pipelines/wan/pipeline_wan.py for the latents' normalisation
//
// As the reference, encode and decode run chunk by chunk (encode: frame 0, then 4 frames at a
// time; decode: one latent frame at a time) and each causal convolution carries its last two
// input frames from one chunk to the next (CausalConvCache in the .cpp): the first chunk's causal
// padding is zeros, later chunks see the frames before them. Only this chunked path exists; the
// reference's whole-clip path skips the temporal upsampling and is not what its pipelines run.
// Wan 2.2's VAE (is_residual, patch_size) is refused by read_wan_vae_config.

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "loom/model/vae/autoencoder_kl.h"  // LatentDistribution

namespace loom {

struct WanVAEConfig {
    int64_t base_dim = 96;
    int64_t decoder_base_dim = 96;
    int64_t z_dim = 16;
    std::vector<int64_t> dim_mult = {1, 2, 4, 4};
    int64_t num_res_blocks = 2;
    // Per downsampling level (dim_mult.size() - 1 of them): whether it also halves the frames.
    std::vector<bool> temperal_downsample = {false, true, true};  // diffusers' spelling
    int64_t in_channels = 3;
    int64_t out_channels = 3;
    // Per latent channel: the pipeline trains and samples (z - mean) / std.
    std::vector<double> latents_mean;
    std::vector<double> latents_std;

    // Frames per latent frame after the first: 2 to the number of temporal downsamplings (4).
    int64_t temporal_compression() const;
    // Pixels per latent cell: 2 to the number of downsamplings (8).
    int64_t spatial_compression() const;
};

// Wan 2.1's latents_mean and latents_std (z_dim 16), what a config without them means.
std::vector<double> wan21_latents_mean();
std::vector<double> wan21_latents_std();

class WanEncoder3dImpl;
class WanDecoder3dImpl;
class WanCausalConv3dImpl;

class AutoencoderKLWanImpl : public torch::nn::Module {
  public:
    explicit AutoencoderKLWanImpl(const WanVAEConfig& config);
    // clip: [B, in_channels, 1 + 4k, H, W] in [-1, 1], H and W multiples of the spatial
    // compression. Returns the distribution over [B, z_dim, 1 + k, H/8, W/8] latents (raw, not
    // normalised). A clip of another frame count or size is a clear Error.
    LatentDistribution encode(const at::Tensor& clip);
    // Raw latents [B, z_dim, F, h, w] -> the clip [B, out_channels, 1 + 4 (F - 1), 8h, 8w],
    // clamped to [-1, 1].
    at::Tensor decode(const at::Tensor& latents);

    // (z - latents_mean) / latents_std per channel, as the Wan pipelines train and sample, and
    // back. z: [B, z_dim, F, h, w].
    at::Tensor normalize_latents(const at::Tensor& z) const;
    at::Tensor denormalize_latents(const at::Tensor& z) const;

    const WanVAEConfig& config() const { return config_; }

  private:
    WanVAEConfig config_;
    std::shared_ptr<WanEncoder3dImpl> encoder;
    std::shared_ptr<WanDecoder3dImpl> decoder;
    std::shared_ptr<WanCausalConv3dImpl> quant_conv;
    std::shared_ptr<WanCausalConv3dImpl> post_quant_conv;
};
TORCH_MODULE(AutoencoderKLWan);

// An AutoencoderKLWan config.json (Wan 2.1's VAE; Wan 2.2's residual, patchified VAE is refused
// as not supported yet), or an AutoencoderKLQwenImage one (Qwen-Image's VAE: Wan 2.1's modules
// and computation, its image channels written input_channels). Without latents_mean /
// latents_std, Wan 2.1's values (z_dim 16).
WanVAEConfig read_wan_vae_config(const std::filesystem::path& config_json);

// The VAE folder `dir` (config.json and its weights) at `dtype`, in eval mode.
AutoencoderKLWan load_wan_vae(const std::filesystem::path& dir, at::ScalarType dtype = at::kFloat);

}  // namespace loom
