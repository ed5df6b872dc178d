#include "loom/train/graphed_forward_backward.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "loom/core/error.h"
#include "loom/device/step_graphs.h"
#include "loom/train/objective.h"

namespace loom {

namespace {

// A buffer holding `t` (same shape, dtype, device); undefined stays undefined.
at::Tensor static_copy(const at::Tensor& t) {
    return t.defined() ? t.detach().clone(at::MemoryFormat::Contiguous) : at::Tensor();
}

void copy_into(at::Tensor& buffer, const at::Tensor& t) {
    if (t.defined()) buffer.copy_(t);
}

}  // namespace

GraphedForwardBackward::GraphedForwardBackward(StepGraphs& graphs, ModelFamily& model,
                                               const DiffusionObjective& objective,
                                               std::vector<at::Tensor> params)
    : graphs_(graphs), model_(model), objective_(objective), params_(std::move(params)) {}

// The accumulators become the parameters' .grad before the first micro-batch: backward() then
// adds into them in place (autograd's AccumulateGrad adds into a defined gradient when grad mode
// is off, as it is during backward), so a capture records additions into the accumulators'
// addresses. backward() and not autograd::grad: gradient checkpointing's recompute runs its own
// backward inside, which reaches the parameters of a checkpointed block through .grad only.
void GraphedForwardBackward::begin_step() {
    torch::NoGradGuard no_grad;
    if (accumulated_.empty()) {
        for (const at::Tensor& p : params_) accumulated_.push_back(at::zeros_like(p).detach());
    } else {
        at::_foreach_zero_(accumulated_);
    }
    for (std::size_t i = 0; i < params_.size(); ++i) params_[i].mutable_grad() = accumulated_[i];
}

// What a capture records: reads the static inputs, writes the static loss and adds into the
// accumulators; allocates only inside (the capture's pool) or nothing it keeps.
void GraphedForwardBackward::work(Static& s) {
    const at::Tensor pred = model_.predict(s.in.noisy, s.in.timesteps, s.in.conditioning);
    const at::Tensor weighted = objective_.loss(pred, s.in.target, s.in.loss_weights) * s.weight;
    weighted.backward();
    torch::NoGradGuard no_grad;
    s.loss.copy_(weighted.detach());
}

at::Tensor GraphedForwardBackward::run(const std::string& key, const Inputs& in) {
    auto found = statics_.find(key);
    if (found == statics_.end()) {
        Static s;
        const StepConditioning& c = in.conditioning;
        StepConditioning captured;
        captured.context = static_copy(c.context);
        captured.pooled = static_copy(c.pooled);
        captured.context_mask = static_copy(c.context_mask);
        captured.extra = static_copy(c.extra);
        captured.control = static_copy(c.control);
        captured.inpaint = static_copy(c.inpaint);
        s.in = {static_copy(in.noisy),
                static_copy(in.timesteps),
                std::move(captured),
                static_copy(in.target),
                in.weight,
                static_copy(in.loss_weights)};
        const auto options = in.target.options().dtype(at::kFloat);
        s.weight = at::empty({}, options);
        s.loss = at::empty({}, options);
        found = statics_.emplace(key, std::move(s)).first;
    }
    Static& s = found->second;
    {
        torch::NoGradGuard no_grad;
        copy_into(s.in.noisy, in.noisy);
        copy_into(s.in.timesteps, in.timesteps);
        copy_into(s.in.conditioning.context, in.conditioning.context);
        copy_into(s.in.conditioning.pooled, in.conditioning.pooled);
        copy_into(s.in.conditioning.context_mask, in.conditioning.context_mask);
        copy_into(s.in.conditioning.extra, in.conditioning.extra);
        copy_into(s.in.conditioning.control, in.conditioning.control);
        copy_into(s.in.conditioning.inpaint, in.conditioning.inpaint);
        copy_into(s.in.target, in.target);
        copy_into(s.in.loss_weights, in.loss_weights);
        s.weight.fill_(in.weight);
    }
    graphs_.run(key, [&] { work(s); });
    return s.loss.clone();
}

void GraphedForwardBackward::finish_step() {
    // A replay adds into the accumulators' memory; a gradient autograd replaced instead of adding
    // into it would leave every later replay writing where nobody reads.
    for (std::size_t i = 0; i < params_.size(); ++i) {
        if (!params_[i].grad().is_same(accumulated_[i])) {
            throw Error(
                "perf.cuda_graphs: a LoRA gradient was replaced during backward instead "
                "of accumulated in place; turn perf.cuda_graphs off for this job");
        }
    }
}

void GraphedForwardBackward::clear() {
    graphs_.clear();
    statics_.clear();
    for (at::Tensor& p : params_) p.mutable_grad() = at::Tensor();
    accumulated_.clear();
}

}  // namespace loom
