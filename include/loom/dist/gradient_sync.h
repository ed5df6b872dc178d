#pragma once

// The LoRA's gradients summed over the ranks of a data-parallel step: one all-reduce of one flat
// host buffer per step (not one per tensor), written back into each gradient in its own dtype
// and device. Each rank weights its items' losses by their share of the global step, so the sum
// is the global step's mean gradient: N ranks at batch b train what one process at batch N·b
// trains.

#include <ATen/core/Tensor.h>

#include <vector>

namespace loom::dist {

class ProcessGroup;

// Sums the gradients of `params` over `group`, in place, and returns the sum of every rank's
// `loss_here` (it travels in the same buffer: the step's loss costs no second collective). A
// parameter without a gradient on this rank (no item of its reached it) counts as zeros and gets
// the sum; the buffer is float32.
double all_reduce_gradients(ProcessGroup& group, const std::vector<at::Tensor>& params,
                            double loss_here = 0.0);

}  // namespace loom::dist
