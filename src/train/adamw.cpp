#include "loom/train/adamw.h"

#include <ATen/ATen.h>
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
    : params_(std::move(params)), options_(options) {
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

void AdamW::step(double lr) {
    torch::NoGradGuard no_grad;
    const int64_t t = step_ + 1;
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

void AdamW::zero_grad() {
    for (at::Tensor& p : params_) p.mutable_grad() = at::Tensor();
}

double AdamW::clip_grad_norm(double max_norm) {
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> grads;
    for (const at::Tensor& p : params_) {
        if (p.grad().defined()) grads.push_back(p.grad());
    }
    if (grads.empty()) return 0.0;
    // torch.nn.utils.clip_grad_norm_'s way: per-tensor norms in one foreach call.
    const double norm = at::stack(at::_foreach_norm(grads, 2)).norm().item<double>();  // one sync
    if (max_norm > 0 && norm > max_norm) at::_foreach_mul_(grads, max_norm / (norm + 1e-6));
    return norm;
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

}  // namespace loom
