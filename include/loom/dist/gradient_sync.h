#pragma once

// The LoRA's gradients summed over the ranks of a data-parallel step: one all-reduce of one flat
// buffer per step (not one per tensor), written back into each gradient in its own dtype and
// device. Each rank weights its items' losses by their share of the global step, so the sum is
// the global step's mean gradient: N ranks at batch b train what one process at batch N·b
// trains. The buffer is on the host (Gloo), or on the GPU where the group sums CUDA tensors
// itself (NCCL, ProcessGroup::device_collectives).

#include <ATen/core/Tensor.h>

#include <vector>

namespace loom::dist {

class ProcessGroup;

// One step's exchange. The buffer is made and filled by the constructor — before the ranks
// agree that every one of them got through its backward pass, so that its allocation (on the
// device with NCCL) can fail only inside this rank's own attempt, before any collective — and
// summed by all_reduce. A parameter without a gradient on this rank (no item of its reached
// it) counts as zeros and gets the sum; the buffer is float32; the step's loss rides in it.
class GradientExchange {
  public:
    GradientExchange(ProcessGroup& group, std::vector<at::Tensor> params, double loss_here);
    // Sums over the group, writes every gradient back and returns the sum of the ranks' losses.
    double all_reduce();

  private:
    ProcessGroup& group_;
    std::vector<at::Tensor> params_;
    at::Tensor flat_;
    bool on_device_ = false;
};

// The exchange in one call (no agreement in between).
double all_reduce_gradients(ProcessGroup& group, const std::vector<at::Tensor>& params,
                            double loss_here = 0.0);

}  // namespace loom::dist
