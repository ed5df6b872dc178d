#include "loom/model/vae/wan_vae.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "loading/config_reader.h"
#include "loom/core/error.h"
#include "loom/model/loading/weight_files.h"
#include "loom/model/nn/host_conv.h"

namespace loom {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Frames each causal convolution carries from one chunk to the next: its temporal kernel is 3,
// so the two frames before a chunk are all it can see of the past.
constexpr int64_t kCacheFrames = 2;

// The last min(n, T) frames of x [B, C, T, H, W], as a tensor of their own.
at::Tensor last_frames(const at::Tensor& x, int64_t n) {
    const int64_t frames = x.size(2);
    const int64_t keep = std::min(n, frames);
    return x.narrow(2, frames - keep, keep).clone();
}

// A submodule `name` of `parent` with no parameters of its own, so that the ones under it get
// the reference's nested names ("resample.1.weight").
torch::nn::Module& holder(torch::nn::Module& parent, const std::string& name) {
    return *parent.register_module(name, std::make_shared<torch::nn::Module>());
}

// What every causal convolution remembers between the chunks of one clip, in the order the
// forward pass meets them (diffusers' feat_cache and feat_idx). A slot is empty before the first
// chunk; an upsampling slot is marked `first_chunk_passed` after it, since the first chunk skips
// the temporal upsampling (the reference's "Rep").
class CausalConvCache {
  public:
    struct Slot {
        at::Tensor frames;
        bool first_chunk_passed = false;
        bool empty() const { return !frames.defined() && !first_chunk_passed; }
    };
    Slot& next() {
        if (next_ == slots_.size()) slots_.emplace_back();
        return slots_[next_++];
    }
    // Called before each chunk: the slots are met again in the same order.
    void start_chunk() { next_ = 0; }

  private:
    std::vector<Slot> slots_;
    std::size_t next_ = 0;
};

// A torch Conv2d module's forward through frozen_conv (its padding given as numbers).
at::Tensor conv2d(const torch::nn::Conv2d& conv, const at::Tensor& x) {
    const auto& options = conv->options;
    const auto& padding = std::get<torch::ExpandingArray<2>>(options.padding());
    return frozen_conv(x, conv->weight, conv->bias, options.stride(), padding, options.dilation(),
                       options.groups());
}

}  // namespace

// A Conv3d whose temporal padding is all before the clip (2 * padding frames, none after), so an
// output frame never sees a later input frame; the frames of the previous chunk stand in for as
// much of that padding as they cover.
class WanCausalConv3dImpl : public torch::nn::Conv3dImpl {
  public:
    WanCausalConv3dImpl(int64_t in, int64_t out, std::array<int64_t, 3> kernel,
                        std::array<int64_t, 3> padding = {0, 0, 0},
                        std::array<int64_t, 3> stride = {1, 1, 1})
        : torch::nn::Conv3dImpl(torch::nn::Conv3dOptions(in, out, {kernel[0], kernel[1], kernel[2]})
                                    .stride({stride[0], stride[1], stride[2]})),
          time_pad_(2 * padding[0]),
          row_pad_(padding[1]),
          column_pad_(padding[2]) {}

    at::Tensor forward(at::Tensor x, const at::Tensor& previous = {}) {
        int64_t time_pad = time_pad_;
        if (previous.defined() && time_pad > 0) {
            x = at::cat({previous.to(x.device()), x}, 2);
            time_pad -= previous.size(2);
        }
        x = at::constant_pad_nd(x, {column_pad_, column_pad_, row_pad_, row_pad_, time_pad, 0});
        return frozen_conv(x, weight, bias, options.stride(), {0, 0, 0}, options.dilation());
    }

  private:
    int64_t time_pad_, row_pad_, column_pad_;
};

namespace {

std::shared_ptr<WanCausalConv3dImpl> cube_conv(int64_t in, int64_t out) {
    return std::make_shared<WanCausalConv3dImpl>(in, out, std::array<int64_t, 3>{3, 3, 3},
                                                 std::array<int64_t, 3>{1, 1, 1});
}
std::shared_ptr<WanCausalConv3dImpl> point_conv(int64_t in, int64_t out) {
    return std::make_shared<WanCausalConv3dImpl>(in, out, std::array<int64_t, 3>{1, 1, 1});
}

// A causal convolution in a chunked pass: it sees the slot's frames before x, and leaves there
// the last two frames of x (with the previous chunk's last one when x has a single frame).
at::Tensor cached(WanCausalConv3dImpl& conv, const at::Tensor& x, CausalConvCache& cache) {
    CausalConvCache::Slot& slot = cache.next();
    at::Tensor keep = last_frames(x, kCacheFrames);
    if (keep.size(2) < kCacheFrames && slot.frames.defined()) {
        keep = at::cat({last_frames(slot.frames, 1).to(keep.device()), keep}, 2);
    }
    at::Tensor y = conv.forward(x, slot.frames);
    slot.frames = keep;
    return y;
}

// WanRMS_norm: x / ||x|| over the channels (dim 1), times sqrt(channels) and gamma; the norm in
// float32 for half-precision inputs.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& gamma) {
    const bool low_precision = x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16;
    const at::Tensor xf = low_precision ? x.to(at::kFloat) : x;
    const at::Tensor norm = at::clamp_min(at::linalg_vector_norm(xf, 2, {1}, true), 1e-12);
    const double scale = std::sqrt(static_cast<double>(x.size(1)));
    return (xf / norm).to(x.scalar_type()) * scale * gamma;
}

// [B, C, T, H, W] <-> [B*T, C, H, W], for the layers that work frame by frame.
at::Tensor frames_as_batch(const at::Tensor& x) {
    return x.permute({0, 2, 1, 3, 4})
        .reshape({x.size(0) * x.size(2), x.size(1), x.size(3), x.size(4)});
}
at::Tensor batch_as_frames(const at::Tensor& x, int64_t batch) {
    return x.view({batch, x.size(0) / batch, x.size(1), x.size(2), x.size(3)})
        .permute({0, 2, 1, 3, 4});
}

// norm, SiLU, causal conv, twice, plus the input (through a 1x1x1 conv when the width changes).
class WanResidualBlockImpl : public torch::nn::Module {
  public:
    WanResidualBlockImpl(int64_t in, int64_t out) {
        norm1_gamma = holder(*this, "norm1").register_parameter("gamma", at::ones({in, 1, 1, 1}));
        conv1 = register_module("conv1", cube_conv(in, out));
        norm2_gamma = holder(*this, "norm2").register_parameter("gamma", at::ones({out, 1, 1, 1}));
        conv2 = register_module("conv2", cube_conv(out, out));
        if (in != out) conv_shortcut = register_module("conv_shortcut", point_conv(in, out));
    }
    at::Tensor forward(const at::Tensor& x, CausalConvCache& cache) {
        const at::Tensor h = conv_shortcut ? conv_shortcut->forward(x) : x;
        at::Tensor y = cached(*conv1, at::silu(rms_norm(x, norm1_gamma)), cache);
        y = cached(*conv2, at::silu(rms_norm(y, norm2_gamma)), cache);
        return y + h;
    }

  private:
    at::Tensor norm1_gamma, norm2_gamma;
    std::shared_ptr<WanCausalConv3dImpl> conv1, conv2, conv_shortcut;
};

// Single-head self-attention within each frame (no attention across frames).
class WanAttentionBlockImpl : public torch::nn::Module {
  public:
    explicit WanAttentionBlockImpl(int64_t dim) {
        norm_gamma = holder(*this, "norm").register_parameter("gamma", at::ones({dim, 1, 1}));
        to_qkv =
            register_module("to_qkv", torch::nn::Conv2d(torch::nn::Conv2dOptions(dim, dim * 3, 1)));
        proj = register_module("proj", torch::nn::Conv2d(torch::nn::Conv2dOptions(dim, dim, 1)));
    }
    at::Tensor forward(const at::Tensor& x) {
        const int64_t batch = x.size(0), channels = x.size(1), rows = x.size(3), cols = x.size(4);
        const at::Tensor frames = rms_norm(frames_as_batch(x), norm_gamma);
        const int64_t n = frames.size(0);
        // [n, 3C, H, W] -> [n, 1, HW, 3C]: one head, the pixels as tokens.
        const at::Tensor qkv =
            conv2d(to_qkv, frames).reshape({n, 1, channels * 3, -1}).permute({0, 1, 3, 2});
        const auto parts = qkv.contiguous().chunk(3, -1);
        const at::Tensor attended = at::scaled_dot_product_attention(parts[0], parts[1], parts[2]);
        const at::Tensor y =
            conv2d(proj, attended.squeeze(1).permute({0, 2, 1}).reshape({n, channels, rows, cols}));
        return batch_as_frames(y, batch) + x;
    }

  private:
    at::Tensor norm_gamma;
    torch::nn::Conv2d to_qkv{nullptr}, proj{nullptr};
};

// WanResample: halves or doubles the rows and columns frame by frame, and in the 3d
// modes the frames too, with a causal temporal conv.
class WanResampleImpl : public torch::nn::Module {
  public:
    enum class Mode { kUpsample2d, kUpsample3d, kDownsample2d, kDownsample3d };

    WanResampleImpl(int64_t dim, Mode mode, int64_t upsample_out_dim) : mode_(mode) {
        torch::nn::Module& resample = holder(*this, "resample");
        const bool up = mode == Mode::kUpsample2d || mode == Mode::kUpsample3d;
        conv = resample.register_module(
            "1", torch::nn::Conv2d(torch::nn::Conv2dOptions(dim, up ? upsample_out_dim : dim, 3)
                                       .padding(up ? 1 : 0)
                                       .stride(up ? 1 : 2)));
        if (mode == Mode::kUpsample3d) {
            time_conv = register_module(
                "time_conv",
                std::make_shared<WanCausalConv3dImpl>(dim, dim * 2, std::array<int64_t, 3>{3, 1, 1},
                                                      std::array<int64_t, 3>{1, 0, 0}));
        } else if (mode == Mode::kDownsample3d) {
            time_conv = register_module(
                "time_conv", std::make_shared<WanCausalConv3dImpl>(
                                 dim, dim, std::array<int64_t, 3>{3, 1, 1},
                                 std::array<int64_t, 3>{0, 0, 0}, std::array<int64_t, 3>{2, 1, 1}));
        }
    }

    at::Tensor forward(at::Tensor x, CausalConvCache& cache) {
        if (mode_ == Mode::kUpsample3d) x = double_frames(x, cache.next());
        const int64_t batch = x.size(0);
        at::Tensor frames = frames_as_batch(x);
        if (mode_ == Mode::kUpsample2d || mode_ == Mode::kUpsample3d) {
            // nearest-exact in float32, as WanUpsample.
            frames = at::_upsample_nearest_exact2d(frames.to(at::kFloat),
                                                   {frames.size(2) * 2, frames.size(3) * 2})
                         .to(x.scalar_type());
        } else {
            frames = at::constant_pad_nd(frames, {0, 1, 0, 1});  // ZeroPad2d((0, 1, 0, 1))
        }
        x = batch_as_frames(conv2d(conv, frames), batch);
        if (mode_ == Mode::kDownsample3d) x = halve_frames(x, cache.next());
        return x;
    }

  private:
    // Upsample3d: the first chunk passes as it is (one frame stays one frame); later chunks go
    // through the temporal conv, whose 2C channels are each frame's two output frames.
    at::Tensor double_frames(const at::Tensor& x, CausalConvCache::Slot& slot) {
        if (slot.empty()) {
            slot.first_chunk_passed = true;
            return x;
        }
        at::Tensor keep = last_frames(x, kCacheFrames);
        if (keep.size(2) < kCacheFrames) {
            const at::Tensor before =
                slot.frames.defined() ? last_frames(slot.frames, 1) : at::zeros_like(keep);
            keep = at::cat({before.to(keep.device()), keep}, 2);
        }
        const at::Tensor y = time_conv->forward(x, slot.frames);
        slot.frames = keep;
        const int64_t b = x.size(0), c = x.size(1), t = x.size(2), h = x.size(3), w = x.size(4);
        const at::Tensor pairs = y.reshape({b, 2, c, t, h, w});
        return at::stack({pairs.select(1, 0), pairs.select(1, 1)}, 3).reshape({b, c, t * 2, h, w});
    }

    // Downsample3d: the first chunk's single frame is kept as it is; later chunks are convolved
    // (stride 2 in time) behind the previous chunk's last frame.
    at::Tensor halve_frames(const at::Tensor& x, CausalConvCache::Slot& slot) {
        if (slot.empty()) {
            slot.frames = x.clone();
            return x;
        }
        const at::Tensor keep = last_frames(x, 1);
        const at::Tensor y = time_conv->forward(at::cat({last_frames(slot.frames, 1), x}, 2));
        slot.frames = keep;
        return y;
    }

    Mode mode_;
    torch::nn::Conv2d conv{nullptr};
    std::shared_ptr<WanCausalConv3dImpl> time_conv;
};

// resnet, then [attention, resnet] (WanMidBlock with one layer).
class WanMidBlockImpl : public torch::nn::Module {
  public:
    explicit WanMidBlockImpl(int64_t dim) {
        torch::nn::ModuleList resnets;
        resnets->push_back(std::make_shared<WanResidualBlockImpl>(dim, dim));
        resnets->push_back(std::make_shared<WanResidualBlockImpl>(dim, dim));
        first = resnets[0]->as<WanResidualBlockImpl>();
        second = resnets[1]->as<WanResidualBlockImpl>();
        register_module("resnets", resnets);
        torch::nn::ModuleList attentions;
        attentions->push_back(std::make_shared<WanAttentionBlockImpl>(dim));
        attention = attentions[0]->as<WanAttentionBlockImpl>();
        register_module("attentions", attentions);
    }
    at::Tensor forward(const at::Tensor& x, CausalConvCache& cache) {
        return second->forward(attention->forward(first->forward(x, cache)), cache);
    }

  private:
    WanResidualBlockImpl* first = nullptr;
    WanResidualBlockImpl* second = nullptr;
    WanAttentionBlockImpl* attention = nullptr;
};

// norm_out, SiLU, conv_out: the last layers of the encoder and the decoder.
at::Tensor head(const at::Tensor& x, const at::Tensor& gamma, WanCausalConv3dImpl& conv,
                CausalConvCache& cache) {
    return cached(conv, at::silu(rms_norm(x, gamma)), cache);
}

}  // namespace

class WanEncoder3dImpl : public torch::nn::Module {
  public:
    explicit WanEncoder3dImpl(const WanVAEConfig& c) {
        std::vector<int64_t> dims = {c.base_dim};
        for (const int64_t m : c.dim_mult) dims.push_back(c.base_dim * m);
        conv_in = register_module("conv_in", cube_conv(c.in_channels, dims[0]));
        torch::nn::ModuleList down_blocks;
        const std::size_t levels = c.dim_mult.size();
        for (std::size_t i = 0; i < levels; ++i) {
            int64_t in = dims[i];
            for (int64_t r = 0; r < c.num_res_blocks; ++r) {
                auto block = std::make_shared<WanResidualBlockImpl>(in, dims[i + 1]);
                down_blocks->push_back(block);
                layers_.push_back({block.get(), nullptr});
                in = dims[i + 1];
            }
            if (i + 1 == levels) continue;
            auto resample = std::make_shared<WanResampleImpl>(
                dims[i + 1],
                c.temperal_downsample[i] ? WanResampleImpl::Mode::kDownsample3d
                                         : WanResampleImpl::Mode::kDownsample2d,
                0);
            down_blocks->push_back(resample);
            layers_.push_back({nullptr, resample.get()});
        }
        register_module("down_blocks", down_blocks);
        mid_block = register_module("mid_block", std::make_shared<WanMidBlockImpl>(dims.back()));
        norm_out_gamma =
            holder(*this, "norm_out").register_parameter("gamma", at::ones({dims.back(), 1, 1, 1}));
        conv_out = register_module("conv_out", cube_conv(dims.back(), c.z_dim * 2));
    }

    at::Tensor forward(const at::Tensor& chunk, CausalConvCache& cache) {
        at::Tensor x = cached(*conv_in, chunk, cache);
        for (const Layer& layer : layers_) {
            x = layer.block ? layer.block->forward(x, cache) : layer.resample->forward(x, cache);
        }
        return head(mid_block->forward(x, cache), norm_out_gamma, *conv_out, cache);
    }

  private:
    struct Layer {  // one of the two
        WanResidualBlockImpl* block;
        WanResampleImpl* resample;
    };
    std::vector<Layer> layers_;
    std::shared_ptr<WanCausalConv3dImpl> conv_in, conv_out;
    std::shared_ptr<WanMidBlockImpl> mid_block;
    at::Tensor norm_out_gamma;
};

class WanDecoder3dImpl : public torch::nn::Module {
  public:
    explicit WanDecoder3dImpl(const WanVAEConfig& c) {
        const int64_t dim = c.decoder_base_dim;
        std::vector<int64_t> dims = {dim * c.dim_mult.back()};
        for (auto m = c.dim_mult.rbegin(); m != c.dim_mult.rend(); ++m) dims.push_back(dim * *m);
        conv_in = register_module("conv_in", cube_conv(c.z_dim, dims[0]));
        mid_block = register_module("mid_block", std::make_shared<WanMidBlockImpl>(dims[0]));
        torch::nn::ModuleList up_blocks;
        const std::size_t levels = c.dim_mult.size();
        for (std::size_t i = 0; i < levels; ++i) {
            // Each upsampler halves the width (Wan 2.1), so the next level starts at half.
            int64_t in = i > 0 ? dims[i] / 2 : dims[i];
            const int64_t out = dims[i + 1];
            auto up_block = std::make_shared<torch::nn::Module>();
            torch::nn::ModuleList resnets;
            Level level;
            for (int64_t r = 0; r <= c.num_res_blocks; ++r) {
                auto block = std::make_shared<WanResidualBlockImpl>(in, out);
                resnets->push_back(block);
                level.blocks.push_back(block.get());
                in = out;
            }
            up_block->register_module("resnets", resnets);
            if (i + 1 < levels) {
                // temperal_upsample is temperal_downsample reversed.
                const bool in_time = c.temperal_downsample[levels - 2 - i];
                auto upsampler =
                    std::make_shared<WanResampleImpl>(out,
                                                      in_time ? WanResampleImpl::Mode::kUpsample3d
                                                              : WanResampleImpl::Mode::kUpsample2d,
                                                      out / 2);
                torch::nn::ModuleList upsamplers;
                upsamplers->push_back(upsampler);
                up_block->register_module("upsamplers", upsamplers);
                level.upsampler = upsampler.get();
            }
            up_blocks->push_back(up_block);
            levels_.push_back(std::move(level));
        }
        register_module("up_blocks", up_blocks);
        norm_out_gamma =
            holder(*this, "norm_out").register_parameter("gamma", at::ones({dims.back(), 1, 1, 1}));
        conv_out = register_module("conv_out", cube_conv(dims.back(), c.out_channels));
    }

    at::Tensor forward(const at::Tensor& latent_frame, CausalConvCache& cache) {
        at::Tensor x = mid_block->forward(cached(*conv_in, latent_frame, cache), cache);
        for (const Level& level : levels_) {
            for (WanResidualBlockImpl* block : level.blocks) x = block->forward(x, cache);
            if (level.upsampler) x = level.upsampler->forward(x, cache);
        }
        return head(x, norm_out_gamma, *conv_out, cache);
    }

  private:
    struct Level {
        std::vector<WanResidualBlockImpl*> blocks;
        WanResampleImpl* upsampler = nullptr;
    };
    std::vector<Level> levels_;
    std::shared_ptr<WanCausalConv3dImpl> conv_in, conv_out;
    std::shared_ptr<WanMidBlockImpl> mid_block;
    at::Tensor norm_out_gamma;
};

int64_t WanVAEConfig::temporal_compression() const {
    return int64_t{1} << std::count(temperal_downsample.begin(), temperal_downsample.end(), true);
}

int64_t WanVAEConfig::spatial_compression() const {
    return int64_t{1} << (dim_mult.size() - 1);
}

std::vector<double> wan21_latents_mean() {
    return {-0.7571, -0.7089, -0.9113, 0.1075,  -0.1745, 0.9653,  -0.1517, 1.5508,
            0.4134,  -0.0715, 0.5517,  -0.3632, -0.1922, -0.9497, 0.2503,  -0.2921};
}

std::vector<double> wan21_latents_std() {
    return {2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
            3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160};
}

AutoencoderKLWanImpl::AutoencoderKLWanImpl(const WanVAEConfig& c) : config_(c) {
    if (c.dim_mult.empty() || c.temperal_downsample.size() + 1 != c.dim_mult.size()) {
        throw Error("Wan VAE: temperal_downsample needs one entry per downsampling level (" +
                    std::to_string(c.dim_mult.size() == 0 ? 0 : c.dim_mult.size() - 1) + ")");
    }
    if (static_cast<int64_t>(c.latents_mean.size()) != c.z_dim ||
        static_cast<int64_t>(c.latents_std.size()) != c.z_dim) {
        throw Error("Wan VAE: latents_mean and latents_std need z_dim (" + std::to_string(c.z_dim) +
                    ") entries each");
    }
    encoder = register_module("encoder", std::make_shared<WanEncoder3dImpl>(c));
    quant_conv = register_module("quant_conv", point_conv(c.z_dim * 2, c.z_dim * 2));
    post_quant_conv = register_module("post_quant_conv", point_conv(c.z_dim, c.z_dim));
    decoder = register_module("decoder", std::make_shared<WanDecoder3dImpl>(c));
}

LatentDistribution AutoencoderKLWanImpl::encode(const at::Tensor& clip) {
    const int64_t per_latent = config_.temporal_compression();
    const int64_t side = config_.spatial_compression();
    if (clip.dim() != 5 || clip.size(1) != config_.in_channels) {
        throw Error("Wan VAE: encode takes a clip [batch, " + std::to_string(config_.in_channels) +
                    ", frames, height, width]");
    }
    const int64_t frames = clip.size(2);
    if (frames < 1 || (frames - 1) % per_latent != 0) {
        throw Error("Wan VAE: a clip of " + std::to_string(frames) +
                    " frames cannot be encoded: the frame count must be 1 + " +
                    std::to_string(per_latent) + "k (1, " + std::to_string(1 + per_latent) + ", " +
                    std::to_string(1 + 2 * per_latent) + ", ...)");
    }
    if (clip.size(3) % side != 0 || clip.size(4) % side != 0) {
        throw Error("Wan VAE: a " + std::to_string(clip.size(4)) + "x" +
                    std::to_string(clip.size(3)) + " clip cannot be encoded: width and height " +
                    "must be multiples of " + std::to_string(side));
    }
    CausalConvCache cache;
    std::vector<at::Tensor> chunks = {encoder->forward(clip.narrow(2, 0, 1), cache)};
    for (int64_t start = 1; start < frames; start += per_latent) {
        cache.start_chunk();
        chunks.push_back(encoder->forward(clip.narrow(2, start, per_latent), cache));
    }
    const at::Tensor moments = quant_conv->forward(at::cat(chunks, 2));
    const auto halves = moments.chunk(2, 1);
    return LatentDistribution{halves[0], at::clamp(halves[1], -30.0, 20.0)};
}

at::Tensor AutoencoderKLWanImpl::decode(const at::Tensor& latents) {
    if (latents.dim() != 5 || latents.size(1) != config_.z_dim) {
        throw Error("Wan VAE: decode takes latents [batch, " + std::to_string(config_.z_dim) +
                    ", frames, height, width]");
    }
    const at::Tensor x = post_quant_conv->forward(latents);
    CausalConvCache cache;
    std::vector<at::Tensor> frames;
    for (int64_t i = 0; i < x.size(2); ++i) {
        cache.start_chunk();
        frames.push_back(decoder->forward(x.narrow(2, i, 1), cache));
    }
    return at::clamp(at::cat(frames, 2), -1.0, 1.0);
}

namespace {
// A per-channel list as a [1, C, 1, 1, 1] tensor beside z.
at::Tensor per_channel(const std::vector<double>& values, const at::Tensor& z) {
    return at::tensor(values, at::TensorOptions().dtype(at::kDouble))
        .to(z.device(), z.scalar_type())
        .view({1, -1, 1, 1, 1});
}
}  // namespace

at::Tensor AutoencoderKLWanImpl::normalize_latents(const at::Tensor& z) const {
    // Times 1 / std, in z's dtype, as the pipeline computes it.
    return (z - per_channel(config_.latents_mean, z)) * (1.0 / per_channel(config_.latents_std, z));
}

at::Tensor AutoencoderKLWanImpl::denormalize_latents(const at::Tensor& z) const {
    // Divided by 1 / std, plus the mean, as WanPipeline decodes.
    return z / (1.0 / per_channel(config_.latents_std, z)) + per_channel(config_.latents_mean, z);
}

WanVAEConfig read_wan_vae_config(const fs::path& path) {
    const ConfigReader r(path);
    WanVAEConfig c;
    c.base_dim = r.integer("base_dim", c.base_dim);
    c.decoder_base_dim = r.integer("decoder_base_dim", c.base_dim);  // null: base_dim
    c.z_dim = r.integer("z_dim", c.z_dim);
    c.num_res_blocks = r.integer("num_res_blocks", c.num_res_blocks);
    // AutoencoderKLQwenImage (Qwen-Image's VAE, Wan 2.1's fine-tuned) names its image channels
    // input_channels and decodes to as many: it has no out_channels.
    c.in_channels = r.integer("in_channels", r.integer("input_channels", c.in_channels));
    c.out_channels = r.integer("out_channels", r.integer("input_channels", c.out_channels));
    c.dim_mult = r.list<int64_t>(
        "dim_mult", c.dim_mult, "a non-empty list of positive integers",
        [](const json& e) { return e.is_number_integer() && e.get<int64_t>() >= 1; });
    if (c.dim_mult.empty()) r.fail("dim_mult", "must be a non-empty list of positive integers");
    c.temperal_downsample =
        r.list<bool>("temperal_downsample", c.temperal_downsample, "a list of true/false",
                     [](const json& e) { return e.is_boolean(); });
    if (c.temperal_downsample.size() + 1 != c.dim_mult.size()) {
        r.fail("temperal_downsample", "needs one entry per downsampling level (" +
                                          std::to_string(c.dim_mult.size() - 1) +
                                          ", one fewer than dim_mult)");
    }
    const auto per_channel = [&](const char* key, std::vector<double> fallback) {
        const std::vector<double> out =
            r.list<double>(key, std::move(fallback), "a list of numbers",
                           [](const json& e) { return e.is_number(); });
        if (static_cast<int64_t>(out.size()) != c.z_dim) {
            r.fail(key, "has " + std::to_string(out.size()) + " entries; z_dim is " +
                            std::to_string(c.z_dim));
        }
        return out;
    };
    c.latents_mean = per_channel("latents_mean", wan21_latents_mean());
    c.latents_std = per_channel("latents_std", wan21_latents_std());
    for (const double s : c.latents_std) {
        if (s <= 0) r.fail("latents_std", "entries must be positive");
    }
    if (r.has("attn_scales") && !r.raw()["attn_scales"].empty()) {
        r.fail("attn_scales",
               "is not empty; loom's Wan VAE has attention in its middle blocks "
               "only, as Wan 2.1's");
    }
    // Wan 2.2's VAE (TI2V-5B): residual up and down blocks over 2x2-patchified frames.
    r.require_default<bool>("is_residual", false);
    r.require_null("patch_size");
    if (r.integer("scale_factor_temporal", c.temporal_compression()) != c.temporal_compression()) {
        r.fail("scale_factor_temporal", "disagrees with temperal_downsample (" +
                                            std::to_string(c.temporal_compression()) +
                                            " frames per latent frame)");
    }
    if (r.integer("scale_factor_spatial", c.spatial_compression()) != c.spatial_compression()) {
        r.fail("scale_factor_spatial", "disagrees with dim_mult (" +
                                           std::to_string(c.spatial_compression()) +
                                           " pixels per latent cell)");
    }
    return c;
}

AutoencoderKLWan load_wan_vae(const fs::path& dir, at::ScalarType dtype) {
    return load_component(AutoencoderKLWan(read_wan_vae_config(dir / "config.json")), dir, dtype,
                          "vae");
}

}  // namespace loom
