#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

namespace loom {

// at::convolution(x, weight, bias, ...) (no transposition, no output padding) for a frozen
// convolution — the VAEs' and a UNet's base convolutions.
//
// A bfloat16 or float16 convolution on the host that no gradient flows through (a VAE's encode
// or decode, a preview's UNet) is computed in float32 and rounded once to the input's dtype: a
// CPU without reduced-precision kernels (AVX2 only; oneDNN takes bfloat16 from AVX-512 on) runs
// torch's reference loops for it, twenty to fifty times slower than float32's kernel — most of a
// video VAE's time. One rounding of a float32 sum is what a GPU's bfloat16 convolution gives
// (float32 accumulation), so the result differs from torch's CPU kernel only in summation order.
// The float32 working copies are made as host memory (device/host_memory.h): on `sim` the budget
// sees the reduced-precision output a device's kernel makes, not this CPU's way of computing it.
// Anything else — other dtypes and devices, or a convolution autograd records — goes to torch,
// and so does everything with LOOM_HOST_CONV=torch (for comparisons).
at::Tensor frozen_conv(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                       c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
                       int64_t groups = 1);

}  // namespace loom
