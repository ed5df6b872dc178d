#pragma once

// The optimizer of a LoRA run (`train.optimizer`), behind one interface: AdamW (adamw.h), 8-bit
// AdamW (adamw_8bit.h) and Prodigy (prodigy.h). Every implementation's step is all or nothing
// (reference/oom-anchors.md §5.3): it computes every new value before writing any, so an OOM
// inside step() leaves parameters and state exactly as they were and the step can be retried.
// Gradient clipping and zero_grad are the same for all of them.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace loom {

namespace config {
struct TrainConfig;
}

// What a checkpoint keeps of an optimizer: per-parameter tensor lists (one entry per parameter,
// in parameter order) and scalars, under names the optimizer chooses.
struct OptimizerState {
    std::string kind;  // "adamw", "adamw8bit", "prodigy": a state loads only into its own kind
    std::int64_t steps = 0;
    std::map<std::string, std::vector<at::Tensor>> lists;
    std::map<std::string, double> scalars;
};

class Optimizer {
  public:
    explicit Optimizer(std::vector<at::Tensor> params) : params_(std::move(params)) {}
    virtual ~Optimizer() = default;
    Optimizer(const Optimizer&) = delete;
    Optimizer& operator=(const Optimizer&) = delete;

    // One update with learning rate `lr` from the parameters' .grad() (parameters without a
    // gradient are skipped). All or nothing.
    virtual void step(double lr) = 0;
    // Sets every gradient to undefined (not zeros): what an OOM retry needs.
    void zero_grad();
    // Scales gradients so their global L2 norm is at most `max_norm`; returns the norm before.
    double clip_grad_norm(double max_norm);

    // perf.cuda_graphs: the whole update as device work with no host read-back (adamw.h).
    // Only AdamW's fused kernel supports it; the others answer false and step() runs instead.
    virtual bool device_step_supported() const { return false; }
    virtual void prepare_device_step(double /*lr*/) {}
    virtual void device_step(double /*max_grad_norm*/) {}
    virtual void count_device_step() {}

    virtual std::int64_t steps_taken() const = 0;
    const std::vector<at::Tensor>& params() const { return params_; }
    // The persistent state (host copies for a checkpoint) and its restore; load_state throws
    // loom::Error when the state is another optimizer's or does not fit the parameters.
    virtual OptimizerState state() const = 0;
    virtual void load_state(const OptimizerState& state) = 0;
    // The bytes the persistent state holds on the parameters' device.
    virtual std::uint64_t state_bytes() const = 0;

  protected:
    std::vector<at::Tensor> params_;
};

// The optimizer `train.optimizer` names, with `train.optimizer_params` and `fused`
// (perf.fused_adamw, AdamW only); the learning rate comes with each step().
std::unique_ptr<Optimizer> make_optimizer(const config::TrainConfig& train,
                                          std::vector<at::Tensor> params, bool fused);

// Throws loom::Error unless `state` is of `kind` and has `count` entries in each of `lists`.
void check_optimizer_state(const OptimizerState& state, const std::string& kind,
                           const std::vector<std::string>& lists, std::size_t count);

}  // namespace loom
