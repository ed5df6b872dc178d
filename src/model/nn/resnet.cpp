#include "loom/model/nn/resnet.h"

#include <ATen/ATen.h>

namespace loom {

ResnetBlock2DImpl::ResnetBlock2DImpl(const ResnetBlock2DOptions& o)
    : output_scale_factor_(o.output_scale_factor) {
    norm1 = register_module(
        "norm1", torch::nn::GroupNorm(
                     torch::nn::GroupNormOptions(o.groups, o.in_channels).eps(o.eps).affine(true)));
    conv1 = register_module("conv1", Conv2d(o.in_channels, o.out_channels, 3, 1, 1));
    if (o.temb_channels) {
        time_emb_proj = register_module("time_emb_proj", Linear(*o.temb_channels, o.out_channels));
    }
    norm2 = register_module(
        "norm2",
        torch::nn::GroupNorm(
            torch::nn::GroupNormOptions(o.groups, o.out_channels).eps(o.eps).affine(true)));
    conv2 = register_module("conv2", Conv2d(o.out_channels, o.out_channels, 3, 1, 1));
    if (o.in_channels != o.out_channels) {
        conv_shortcut = register_module("conv_shortcut", Conv2d(o.in_channels, o.out_channels, 1));
    }
}

at::Tensor ResnetBlock2DImpl::forward(const at::Tensor& x, const at::Tensor& temb) {
    at::Tensor h = conv1(at::silu(norm1(x)));
    if (temb.defined() && time_emb_proj) {
        h = h + time_emb_proj(at::silu(temb)).unsqueeze(-1).unsqueeze(-1);  // [B, C, 1, 1]
    }
    h = conv2(at::silu(norm2(h)));
    const at::Tensor shortcut = conv_shortcut ? conv_shortcut(x) : x;
    at::Tensor out = shortcut + h;
    if (output_scale_factor_ != 1.0) out = out / output_scale_factor_;
    return out;
}

Downsample2DImpl::Downsample2DImpl(int64_t channels, int64_t padding) : padding_(padding) {
    conv = register_module("conv", Conv2d(channels, channels, 3, 2, padding));
}

at::Tensor Downsample2DImpl::forward(const at::Tensor& x) {
    if (padding_ == 0) return conv(at::constant_pad_nd(x, {0, 1, 0, 1}, 0));
    return conv(x);
}

Upsample2DImpl::Upsample2DImpl(int64_t channels) {
    conv = register_module("conv", Conv2d(channels, channels, 3, 1, 1));
}

at::Tensor Upsample2DImpl::forward(const at::Tensor& x, std::optional<std::vector<int64_t>> size) {
    at::Tensor up = size ? at::upsample_nearest2d(x, *size)
                         : at::upsample_nearest2d(x, {x.size(2) * 2, x.size(3) * 2});
    return conv(up);
}

}  // namespace loom
