#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <functional>

namespace loom {

// rows · weightᵀ (+ bias) for a 2-D `rows` [M, K] and `weight` [N, K] of any strides (a
// transposed view gives rows · W, the input gradient of a Linear layer): the product of every
// Linear layer's forward and backward in LoRA training.
//
// Float32 on the host runs oneDNN's matmul (torch's mkldnn::_linear_pointwise) rather than
// torch's addmm, which calls MKL's sgemm: on AMD processors MKL picks its generic kernel, about
// half oneDNN's speed at a Linear layer's shapes (docs/BENCHMARKS.md). Both are IEEE float32
// products that differ only in summation order. bfloat16 or float16 on the host is computed in
// float32 the same way and rounded once: a CPU without AVX-512 has no reduced-precision GEMM in
// torch, whose reference loop is tens of times slower, and one rounding of a float32 sum is what
// a GPU's bf16 GEMM gives (float32 accumulation). The float32 working copies are host memory
// (device/host_memory.h): on `sim` the budget sees the bf16 product a device would make. Every
// other device, and a torch built without oneDNN, take addmm. LOOM_HOST_MATMUL=torch takes addmm
// everywhere (for comparisons).
at::Tensor linear_rows(const at::Tensor& rows, const at::Tensor& weight,
                       const c10::optional<at::Tensor>& bias = c10::nullopt);

// Whether linear_rows has oneDNN's kernel (this torch has it and LOOM_HOST_MATMUL is not torch).
bool host_matmul_uses_onednn();

// A frozen layer's weight had again for its backward, instead of the forward's copy kept alive
// until then: a weight streamed from the host is copied once more, a quantized one dequantized
// once more (train/low_vram.h), so the device holds a layer's copy only while the layer computes.
using WeightRefetch = std::function<at::Tensor()>;

// at::linear(x, weight, bias) for a frozen layer (weight and bias without gradients; `bias` may be
// undefined), its forward and its input gradient through linear_rows where oneDNN applies or the
// operands are bf16/fp16 on the host. A weight that trains, or other tensors, go to at::linear
// unchanged. With `refetch`, the backward calls it for the weight and nothing of it is saved (any
// dtype, device).
at::Tensor frozen_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                         const WeightRefetch& refetch = {});

// How a custom autograd function carries a WeightRefetch to its backward (saved_data holds
// IValues): as a capsule, and back.
c10::IValue refetch_capsule(const WeightRefetch& refetch);
WeightRefetch refetch_of(const c10::IValue& capsule);

}  // namespace loom
