#include "loom/train/adamw.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>

#include "loom/core/error.h"

namespace loom {

AdamW::AdamW(std::vector<at::Tensor> params, AdamWOptions options)
    : params_(std::move(params)), options_(options) {
    for (const at::Tensor& p : params_) {
        exp_avg_.push_back(at::zeros_like(p, at::MemoryFormat::Preserve).detach());
        exp_avg_sq_.push_back(at::zeros_like(p, at::MemoryFormat::Preserve).detach());
    }
}

void AdamW::step(double lr) {
    torch::NoGradGuard no_grad;
    const int64_t t = step_ + 1;
    const double bias1 = 1.0 - std::pow(options_.beta1, static_cast<double>(t));
    const double bias2 = 1.0 - std::pow(options_.beta2, static_cast<double>(t));
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
    std::vector<at::Tensor> norms;
    for (const at::Tensor& p : params_) {
        if (p.grad().defined()) norms.push_back(p.grad().to(at::kDouble).norm());
    }
    if (norms.empty()) return 0.0;
    const double norm = at::stack(norms).norm().item<double>();  // one host sync
    if (max_norm > 0 && norm > max_norm) {
        const double scale = max_norm / (norm + 1e-6);  // torch.nn.utils.clip_grad_norm_
        for (at::Tensor& p : params_) {
            if (p.grad().defined()) p.mutable_grad().mul_(scale);
        }
    }
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
