#pragma once

// AdamW (torch.optim.AdamW's math) with an atomic step (reference/oom-anchors.md §5.3): its state
// exists from construction, and step() computes every new value out of place before writing any
// of them, so an OOM inside step() leaves parameters and state exactly as they were and the step
// can simply be retried. LibTorch's own AdamW decays a parameter before lazily creating its state,
// so a failed step there is half-applied.

#include <ATen/core/Tensor.h>

#include <vector>

namespace loom {

struct AdamWOptions {
    double lr = 1e-4;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-6;  // ai-toolkit's AdamW uses 1e-6
    double weight_decay = 0.01;
};

class AdamW {
  public:
    AdamW(std::vector<at::Tensor> params, AdamWOptions options);

    // One update with learning rate `lr` from the parameters' .grad() (parameters without a
    // gradient are skipped but still count the step). All or nothing.
    void step(double lr);
    // Sets every gradient to undefined (not zeros): what an OOM retry needs.
    void zero_grad();

    // Scales gradients so their global L2 norm is at most `max_norm`; returns the norm before.
    double clip_grad_norm(double max_norm);

    int64_t steps_taken() const { return step_; }
    const std::vector<at::Tensor>& params() const { return params_; }
    // exp_avg and exp_avg_sq per parameter, for checkpoints.
    const std::vector<at::Tensor>& exp_avg() const { return exp_avg_; }
    const std::vector<at::Tensor>& exp_avg_sq() const { return exp_avg_sq_; }
    // Restores state written by a checkpoint (shapes must match).
    void load_state(int64_t steps, const std::vector<at::Tensor>& exp_avg,
                    const std::vector<at::Tensor>& exp_avg_sq);

  private:
    bool every_grad_defined() const;
    void step_flat(double lr, double bias1, double bias2);

    std::vector<at::Tensor> params_;
    // With every parameter contiguous, of one dtype and on one device, the state is two flat
    // buffers and exp_avg_ / exp_avg_sq_ are views of them (undefined otherwise).
    at::Tensor flat_exp_avg_;
    at::Tensor flat_exp_avg_sq_;
    std::vector<at::Tensor> exp_avg_;
    std::vector<at::Tensor> exp_avg_sq_;
    AdamWOptions options_;
    int64_t step_ = 0;
};

}  // namespace loom
