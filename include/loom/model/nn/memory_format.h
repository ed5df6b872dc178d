#pragma once

// Channels-last activations (perf.channels_last): the UNet and the VAE can run their convolutions
// on [B, C, H, W] tensors laid out as [B, H, W, C] in memory, which cuDNN's tensor-core kernels
// prefer. The models convert their input on the way in and their output back on the way out, so
// callers, caches and losses only ever see the standard layout; the conv weights are converted
// once, here, and every copy made of them later keeps the layout (Device::to_device/to_host,
// Tensor::to, clone: low_vram's bf16 conversion and block streaming).
//
// LoRA weights stay in the standard layout: they are few and small, the optimizer's flat state
// needs them contiguous, and a convolution mixing the layouts computes the same values (cuDNN
// converts the small weight for the call).

#include <ATen/core/Tensor.h>
#include <c10/core/MemoryFormat.h>

namespace torch::nn {
class Module;
}

namespace loom {

// Every 4-D parameter of `module` (its conv weights) in `format`, in place: set_data keeps each
// parameter's identity, so references held elsewhere stay valid. The copies are made where the
// weights live: call it before the model is placed (host memory) to keep them off the device.
void set_conv_weights_format(torch::nn::Module& module, c10::MemoryFormat format);

// `x` in channels-last layout when `channels_last` is set and it is 4-D; `x` itself otherwise.
at::Tensor channels_last_if(const at::Tensor& x, bool channels_last);

}  // namespace loom
