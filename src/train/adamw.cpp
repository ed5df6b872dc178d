#include "loom/train/adamw.h"

#include <ATen/ATen.h>
#include <ATen/ops/_fused_adamw.h>
#include <torch/autograd.h>

#include <cmath>

#include "loom/core/error.h"

namespace loom {

namespace {

// The flat layout needs every parameter contiguous, of one dtype, on one device.
bool can_flatten(const std::vector<at::Tensor>& params) {
    if (params.empty()) return false;
    const at::Tensor& first = params.front();
    for (const at::Tensor& p : params) {
        if (!p.is_contiguous() || p.scalar_type() != first.scalar_type() ||
            p.device() != first.device()) {
            return false;
        }
    }
    return true;
}

// One flat zero buffer and a view of it shaped like each parameter.
at::Tensor flat_state(const std::vector<at::Tensor>& params, std::vector<at::Tensor>& views) {
    int64_t total = 0;
    for (const at::Tensor& p : params) total += p.numel();
    at::Tensor flat = at::zeros({total}, params.front().options().requires_grad(false));
    int64_t offset = 0;
    for (const at::Tensor& p : params) {
        views.push_back(flat.narrow(0, offset, p.numel()).view(p.sizes()));
        offset += p.numel();
    }
    return flat;
}

}  // namespace

AdamW::AdamW(std::vector<at::Tensor> params, AdamWOptions options)
    : Optimizer(std::move(params)), options_(options) {
    if (options_.fused && !params_.empty()) {
        fused_step_ =
            at::zeros({1}, params_.front().options().dtype(at::kFloat).requires_grad(false));
    }
    if (can_flatten(params_)) {
        flat_exp_avg_ = flat_state(params_, exp_avg_);
        flat_exp_avg_sq_ = flat_state(params_, exp_avg_sq_);
        return;
    }
    for (const at::Tensor& p : params_) {
        exp_avg_.push_back(at::zeros_like(p, at::MemoryFormat::Preserve).detach());
        exp_avg_sq_.push_back(at::zeros_like(p, at::MemoryFormat::Preserve).detach());
    }
}

bool AdamW::every_grad_defined() const {
    for (const at::Tensor& p : params_) {
        if (!p.grad().defined()) return false;
    }
    return true;
}

// The whole update as a handful of operations on flat tensors instead of a dozen per parameter:
// a LoRA has hundreds of small parameters, and per-tensor dispatch was most of the step's
// optimizer time (docs/BENCHMARKS.md, "where the time goes"). torch.optim.AdamW's formulas
// (lerp for the first moment, addcmul for the second). At most three flat temporaries are
// alive at once — the new moments and the update — as in the per-parameter path.
void AdamW::step_flat(double lr, double bias1, double bias2) {
    std::vector<at::Tensor> grads;
    grads.reserve(params_.size());
    for (const at::Tensor& p : params_) grads.push_back(p.grad().reshape({-1}));
    // Phase 1: every new value, out of place. An OOM here changes nothing.
    at::Tensor g = at::cat(grads);
    grads.clear();
    const at::Tensor m = at::lerp(flat_exp_avg_, g, 1.0 - options_.beta1);
    const at::Tensor v = (flat_exp_avg_sq_ * options_.beta2).addcmul_(g, g, 1.0 - options_.beta2);
    g.reset();
    at::Tensor update = v.sqrt();
    update.div_(std::sqrt(bias2)).add_(options_.eps);
    at::div_out(update, m, update);  // m / denom, in the denominator's buffer
    update.mul_(lr / bias1);
    // Phase 2: commit in place, which allocates nothing.
    flat_exp_avg_.copy_(m);
    flat_exp_avg_sq_.copy_(v);
    int64_t offset = 0;
    for (const at::Tensor& p : params_) {
        at::Tensor value = p.detach();
        value.mul_(1.0 - lr * options_.weight_decay)
            .sub_(update.narrow(0, offset, p.numel()).view(p.sizes()));
        offset += p.numel();
    }
}

// The fused path: torch.optim.AdamW(fused=True)'s kernel, which updates parameters and state in
// place. Its update is step_flat's (decoupled decay `p *= 1 - lr * wd`, lerp for the first
// moment, bias corrections from the step count, eps added after the square root), rounded
// differently (fused multiply-adds): equal within 1e-6 relative (test_optim.cpp).
//
// Why it is still all or nothing (reference/oom-anchors.md §5.3), although it writes in place:
// it allocates no device memory, so it has nothing to run out of. On the CPU (cpu, sim) each
// tensor is updated through raw pointers; the kernel's only allocation would be a contiguous copy
// of a strided gradient, and this path is taken only when every tensor is contiguous (the sim
// allocator counts no allocation: test_optim.cpp). On CUDA the tensor addresses travel as kernel
// arguments from host memory (multi_tensor_apply), never through the caching allocator. What the
// driver may still need — loading the kernel's module, growing local memory — it needs at the
// first launch, before anything has been written, and every later launch of the same step runs
// the same kernel. A CUDA error past that point is not an OOM; the guard does not retry it.
// Returns false, having changed nothing, when some tensor does not fit the kernel's rules.
bool AdamW::step_fused(double lr, int64_t t) {
    std::vector<at::Tensor> params;
    std::vector<at::Tensor> grads;
    std::vector<at::Tensor> exp_avgs;
    std::vector<at::Tensor> exp_avg_sqs;
    const at::Tensor& first = params_.front();
    for (std::size_t i = 0; i < params_.size(); ++i) {
        const at::Tensor& p = params_[i];
        const at::Tensor& g = p.grad();
        if (!g.defined()) continue;  // skipped, as in the other paths
        for (const at::Tensor* x :
             std::initializer_list<const at::Tensor*>{&p, &g, &exp_avg_[i], &exp_avg_sq_[i]}) {
            if (!x->is_contiguous() || x->is_sparse() || x->scalar_type() != first.scalar_type() ||
                x->device() != first.device()) {
                return false;
            }
        }
        params.push_back(p);
        grads.push_back(g);
        exp_avgs.push_back(exp_avg_[i]);
        exp_avg_sqs.push_back(exp_avg_sq_[i]);
    }
    if (!params.empty()) {
        fused_step_.fill_(static_cast<double>(t));  // in place: allocates nothing
        const std::vector<at::Tensor> steps(params.size(), fused_step_);
        at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr,
                          options_.beta1, options_.beta2, options_.weight_decay, options_.eps,
                          /*amsgrad=*/false, /*maximize=*/false);
    }
    return true;
}

void AdamW::step(double lr) {
    torch::NoGradGuard no_grad;
    const int64_t t = step_ + 1;
    if (fused_step_.defined() && step_fused(lr, t)) {
        step_ = t;
        return;
    }
    const double bias1 = 1.0 - std::pow(options_.beta1, static_cast<double>(t));
    const double bias2 = 1.0 - std::pow(options_.beta2, static_cast<double>(t));
    if (flat_exp_avg_.defined() && every_grad_defined()) {
        step_flat(lr, bias1, bias2);
        step_ = t;
        return;
    }
    // Per parameter: some have no gradient this step (torch skips those), or the parameters
    // cannot share one flat buffer.
    struct Update {
        std::size_t index;
        at::Tensor param;
        at::Tensor m;
        at::Tensor v;
    };
    // Phase 1: every new value, out of place. An OOM here changes nothing.
    std::vector<Update> updates;
    updates.reserve(params_.size());
    for (std::size_t i = 0; i < params_.size(); ++i) {
        const at::Tensor& p = params_[i];
        const at::Tensor& g = p.grad();
        if (!g.defined()) continue;
        at::Tensor m = exp_avg_[i] * options_.beta1 + g * (1.0 - options_.beta1);
        at::Tensor v = exp_avg_sq_[i] * options_.beta2 + g * g * (1.0 - options_.beta2);
        const at::Tensor denom = v.sqrt() / std::sqrt(bias2) + options_.eps;
        at::Tensor next = p * (1.0 - lr * options_.weight_decay) - (m / denom) * (lr / bias1);
        updates.push_back({i, std::move(next), std::move(m), std::move(v)});
    }
    // Phase 2: commit with in-place copies, which allocate nothing.
    for (Update& u : updates) {
        params_[u.index].copy_(u.param);
        exp_avg_[u.index].copy_(u.m);
        exp_avg_sq_[u.index].copy_(u.v);
    }
    step_ = t;
}

bool AdamW::device_step_supported() const {
    if (params_.empty()) return false;
    const at::Tensor& first = params_.front();
    for (std::size_t i = 0; i < params_.size(); ++i) {
        const at::Tensor& g = params_[i].grad();
        if (!g.defined()) return false;
        for (const at::Tensor* x : {&params_[i], &g, &exp_avg_[i], &exp_avg_sq_[i]}) {
            if (!x->is_contiguous() || x->is_sparse() || x->scalar_type() != first.scalar_type() ||
                x->device() != first.device()) {
                return false;
            }
        }
    }
    return true;
}

void AdamW::prepare_device_step(double lr) {
    torch::NoGradGuard no_grad;
    const auto options = params_.front().options().dtype(at::kFloat).requires_grad(false);
    if (!fused_step_.defined()) fused_step_ = at::zeros({1}, options);
    if (!device_lr_.defined()) device_lr_ = at::zeros({}, options);
    fused_step_.fill_(static_cast<double>(step_ + 1));  // in place: allocates nothing
    device_lr_.fill_(lr);
}

void AdamW::device_step(double max_grad_norm) {
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> grads;
    grads.reserve(params_.size());
    for (const at::Tensor& p : params_) grads.push_back(p.grad());
    if (max_grad_norm > 0) {
        const at::Tensor norm = at::stack(at::_foreach_norm(grads, 2)).norm();
        at::_foreach_mul_(grads, (max_grad_norm / (norm + 1e-6)).clamp_max(1.0));
    }
    const std::vector<at::Tensor> steps(params_.size(), fused_step_);
    at::_fused_adamw_(params_, grads, exp_avg_, exp_avg_sq_, /*max_exp_avg_sqs=*/{}, steps,
                      device_lr_, options_.beta1, options_.beta2, options_.weight_decay,
                      options_.eps, /*amsgrad=*/false, /*maximize=*/false);
}

void AdamW::load_state(int64_t steps, const std::vector<at::Tensor>& exp_avg,
                       const std::vector<at::Tensor>& exp_avg_sq) {
    if (exp_avg.size() != params_.size() || exp_avg_sq.size() != params_.size()) {
        throw Error("optimizer state has " + std::to_string(exp_avg.size()) +
                    " tensors, the network has " + std::to_string(params_.size()));
    }
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params_.size(); ++i) {
        if (exp_avg[i].sizes() != params_[i].sizes() ||
            exp_avg_sq[i].sizes() != params_[i].sizes()) {
            throw Error("optimizer state tensor " + std::to_string(i) +
                        " does not match its parameter's shape");
        }
        exp_avg_[i].copy_(exp_avg[i]);
        exp_avg_sq_[i].copy_(exp_avg_sq[i]);
    }
    step_ = steps;
}

OptimizerState AdamW::state() const {
    OptimizerState s;
    s.kind = "adamw";
    s.steps = step_;
    for (const at::Tensor& t : exp_avg_) s.lists["exp_avg"].push_back(t.detach().cpu());
    for (const at::Tensor& t : exp_avg_sq_) s.lists["exp_avg_sq"].push_back(t.detach().cpu());
    return s;
}

void AdamW::load_state(const OptimizerState& state) {
    check_optimizer_state(state, "adamw", {"exp_avg", "exp_avg_sq"}, params_.size());
    load_state(state.steps, state.lists.at("exp_avg"), state.lists.at("exp_avg_sq"));
}

std::uint64_t AdamW::state_bytes() const {
    std::uint64_t bytes = 0;
    for (std::size_t i = 0; i < exp_avg_.size(); ++i) {
        bytes += exp_avg_[i].nbytes() + exp_avg_sq_[i].nbytes();
    }
    return bytes;
}

}  // namespace loom
