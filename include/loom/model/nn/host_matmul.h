#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

namespace loom {

// rows · weightᵀ (+ bias) for a 2-D `rows` [M, K] and `weight` [N, K] of any strides (a
// transposed view gives rows · W, the input gradient of a Linear layer): the product of every
// Linear layer's forward and backward in LoRA training.
//
// Float32 on the host runs oneDNN's matmul (torch's mkldnn::_linear_pointwise) rather than
// torch's addmm, which calls MKL's sgemm: on AMD processors MKL picks its generic kernel, about
// half oneDNN's speed at a Linear layer's shapes (docs/BENCHMARKS.md). Both are IEEE float32
// products that differ only in summation order. Every other dtype and device, and a torch built
// without oneDNN, take addmm. LOOM_HOST_MATMUL=torch takes addmm everywhere (for comparisons).
at::Tensor linear_rows(const at::Tensor& rows, const at::Tensor& weight,
                       const c10::optional<at::Tensor>& bias = c10::nullopt);

// Whether linear_rows has oneDNN's kernel (this torch has it and LOOM_HOST_MATMUL is not torch).
bool host_matmul_uses_onednn();

// at::linear(x, weight, bias) for a frozen layer (weight and bias without gradients; `bias` may be
// undefined), its forward and its input gradient through linear_rows where oneDNN applies. A
// weight that trains, or a tensor oneDNN does not take, goes to at::linear unchanged.
at::Tensor frozen_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

}  // namespace loom
