#pragma once

// Gradient checkpointing for LibTorch C++ modules (reference/oom-anchors.md §6): a reentrant
// autograd function runs a block without keeping its activations, and runs it again with grad
// enabled during backward. RNG state (CPU and CUDA) is restored for the recompute so dropout
// draws the same masks. A dummy input that requires grad is always passed, so the block's
// backward runs — and frozen-base LoRA parameters inside it get their gradients — even when
// none of the block's tensor inputs requires grad.

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace loom {

using BlockFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// Runs `fn(inputs)`; under grad mode its activations are recomputed in backward instead of kept.
// Undefined tensors among `inputs` are passed through as undefined.
std::vector<at::Tensor> checkpoint(const BlockFn& fn, const std::vector<at::Tensor>& inputs);

}  // namespace loom
