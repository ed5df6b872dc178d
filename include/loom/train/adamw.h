#pragma once

// AdamW (torch.optim.AdamW's math) with an atomic step (reference/oom-anchors.md §5.3): its state
// exists from construction, and step() computes every new value out of place before writing any
// of them, so an OOM inside step() leaves parameters and state exactly as they were and the step
// can simply be retried. LibTorch's own AdamW decays a parameter before lazily creating its state,
// so a failed step there is half-applied.
//
// `fused` (perf.fused_adamw) runs the same update through ATen's fused kernel (at::_fused_adamw_),
// in place and without temporaries: one multi-tensor launch per ~hundred tensors on CUDA instead
// of a dozen element-wise passes over the flat state. Why that is still all or nothing: adamw.cpp.

#include <ATen/core/Tensor.h>

#include <vector>

#include "loom/train/optimizer.h"

namespace loom {

struct AdamWOptions {
    double lr = 1e-4;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-6;  // ai-toolkit's AdamW uses 1e-6
    double weight_decay = 0.01;
    // ATen's fused kernel where every parameter and gradient allows it (one dtype and device,
    // contiguous); the out-of-place path otherwise. Equal results within float rounding.
    bool fused = false;
};

class AdamW final : public Optimizer {
  public:
    AdamW(std::vector<at::Tensor> params, AdamWOptions options);

    // One update with learning rate `lr` from the parameters' .grad() (parameters without a
    // gradient are skipped but still count the step). All or nothing.
    void step(double lr) override;

    // perf.cuda_graphs: the whole update — clipping and the fused AdamW kernel — as device work
    // with no host read-back, so a CUDA graph can capture it. The learning rate and the step
    // count are read from device tensors that prepare_device_step() writes before each run (or
    // replay); clipping computes its factor on the device, min(1, max_norm / (norm + 1e-6)) as
    // torch.nn.utils.clip_grad_norm_ does. count_device_step() counts the step once the update
    // ran. Supported when every parameter has a gradient and the fused kernel's rules hold.
    bool device_step_supported() const override;
    void prepare_device_step(double lr) override;
    void device_step(double max_grad_norm) override;
    void count_device_step() override { ++step_; }

    int64_t steps_taken() const override { return step_; }
    // exp_avg and exp_avg_sq per parameter.
    const std::vector<at::Tensor>& exp_avg() const { return exp_avg_; }
    const std::vector<at::Tensor>& exp_avg_sq() const { return exp_avg_sq_; }
    // Restores the moments (shapes must match).
    void load_state(int64_t steps, const std::vector<at::Tensor>& exp_avg,
                    const std::vector<at::Tensor>& exp_avg_sq);
    // Lists "exp_avg" and "exp_avg_sq" (the checkpoint names loom has always used).
    OptimizerState state() const override;
    void load_state(const OptimizerState& state) override;
    std::uint64_t state_bytes() const override;

  private:
    bool every_grad_defined() const;
    void step_flat(double lr, double bias1, double bias2);
    bool step_fused(double lr, int64_t t);

    // With every parameter contiguous, of one dtype and on one device, the state is two flat
    // buffers and exp_avg_ / exp_avg_sq_ are views of them (undefined otherwise).
    at::Tensor flat_exp_avg_;
    at::Tensor flat_exp_avg_sq_;
    std::vector<at::Tensor> exp_avg_;
    std::vector<at::Tensor> exp_avg_sq_;
    AdamWOptions options_;
    int64_t step_ = 0;
    // The fused kernel reads the step count from a tensor on the parameters' device (float32, as
    // torch.optim keeps it); derived from step_ before each fused step. Undefined unless fused.
    at::Tensor fused_step_;
    at::Tensor device_lr_;  // the learning rate of device_step(), float32 on the device
};

}  // namespace loom
