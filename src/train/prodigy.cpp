#include "loom/train/prodigy.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>

#include "loom/core/error.h"

namespace loom {

Prodigy::Prodigy(std::vector<at::Tensor> params, ProdigyOptions options)
    : Optimizer(std::move(params)), options_(options), d_(options.d0), d_max_(options.d0) {
    torch::NoGradGuard no_grad;
    for (const at::Tensor& p : params_) {
        const at::Tensor flat = p.detach().flatten();
        exp_avg_.push_back(at::zeros_like(p.detach()));
        exp_avg_sq_.push_back(at::zeros_like(p.detach()));
        s_.push_back(at::zeros_like(flat));
        // prodigyopt keeps a 0-dim zero for a parameter that starts at zero (a LoRA up).
        p0_.push_back(flat.any().item<bool>() ? flat.clone() : at::zeros({}, flat.options()));
    }
}

// prodigyopt 1.1's Prodigy.step with one parameter group, in its order. The update and the
// decoupled decay use the step size of the old d; the denominator's d * eps the new d.
void Prodigy::step(double lr) {
    torch::NoGradGuard no_grad;
    const ProdigyOptions& o = options_;
    const double beta1 = o.beta1;
    const double beta2 = o.beta2;
    const double beta3 = o.beta3.value_or(std::sqrt(beta2));
    const double d0 = o.d0;
    const double d = d_;
    const double bias_correction =
        o.use_bias_correction ? std::pow(1.0 - std::pow(beta2, static_cast<double>(k_ + 1)), 0.5) /
                                    (1.0 - std::pow(beta1, static_cast<double>(k_ + 1)))
                              : 1.0;
    const double dlr = d * lr * bias_correction;
    const double d_numerator = d_numerator_ * beta3;
    double delta_numerator = 0.0;
    double d_denom = 0.0;
    struct Update {
        std::size_t index;
        at::Tensor grad;
        at::Tensor exp_avg;
        at::Tensor exp_avg_sq;
        at::Tensor s;
    };
    // Phase 1: the statistics and the new moments, out of place.
    std::vector<Update> updates;
    for (std::size_t i = 0; i < params_.size(); ++i) {
        const at::Tensor p = params_[i].detach();
        if (!params_[i].grad().defined()) continue;
        at::Tensor grad = params_[i].grad();
        if (o.weight_decay != 0.0 && !o.decouple) grad = at::add(grad, p, o.weight_decay);
        if (lr > 0.0) {
            const at::Tensor g_s = grad.flatten();
            delta_numerator += (d / d0) * dlr * at::dot(g_s, p0_[i] - p.flatten()).item<double>();
            Update u{i, grad, {}, exp_avg_sq_[i].clone(), s_[i].clone()};
            if (beta1 > 0.0) {
                u.exp_avg = exp_avg_[i].clone();
                u.exp_avg.mul_(beta1).add_(grad, d * (1.0 - beta1));
            }
            u.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, d * d * (1.0 - beta2));
            u.s.mul_(beta3).add_(g_s, (d / d0) * (o.safeguard_warmup ? d : dlr));
            d_denom += u.s.abs().sum().item<double>();
            updates.push_back(std::move(u));
        } else {
            updates.push_back({i, grad, exp_avg_[i], exp_avg_sq_[i], s_[i]});
        }
    }
    if (d_denom == 0.0) {
        // prodigyopt returns here having updated the moments in place, the weights untouched.
        for (Update& u : updates) {
            if (u.exp_avg.defined()) exp_avg_[u.index].copy_(u.exp_avg);
            exp_avg_sq_[u.index].copy_(u.exp_avg_sq);
            s_[u.index].copy_(u.s);
        }
        return;
    }
    const double global_d_numerator = d_numerator + delta_numerator;
    const double d_hat = o.d_coef * global_d_numerator / d_denom;
    double next_d = d;
    if (next_d == d0) next_d = std::max(next_d, d_hat);
    const double d_max = std::max(d_max_, d_hat);
    next_d = std::min(d_max, next_d * o.growth_rate);
    // The new weights, still out of place.
    std::vector<at::Tensor> values;
    values.reserve(updates.size());
    for (const Update& u : updates) {
        at::Tensor value = params_[u.index].detach().clone();
        const at::Tensor denom = u.exp_avg_sq.sqrt().add_(next_d * o.eps);
        if (o.weight_decay != 0.0 && o.decouple) value.add_(value, -o.weight_decay * dlr);
        if (beta1 > 0.0) {
            value.addcdiv_(u.exp_avg, denom, -dlr);
        } else {
            value.addcdiv_(u.grad, denom, -dlr * next_d);
        }
        values.push_back(std::move(value));
    }
    // Phase 2: commit with in-place copies, which allocate nothing.
    for (std::size_t j = 0; j < updates.size(); ++j) {
        const Update& u = updates[j];
        params_[u.index].detach().copy_(values[j]);
        if (u.exp_avg.defined()) exp_avg_[u.index].copy_(u.exp_avg);
        exp_avg_sq_[u.index].copy_(u.exp_avg_sq);
        s_[u.index].copy_(u.s);
    }
    d_numerator_ = global_d_numerator;
    d_hat_ = d_hat;
    d_max_ = d_max;
    d_ = next_d;
    ++k_;
}

OptimizerState Prodigy::state() const {
    OptimizerState s;
    s.kind = "prodigy";
    s.steps = k_;
    for (std::size_t i = 0; i < params_.size(); ++i) {
        s.lists["exp_avg"].push_back(exp_avg_[i].cpu());
        s.lists["exp_avg_sq"].push_back(exp_avg_sq_[i].cpu());
        s.lists["s"].push_back(s_[i].cpu());
        s.lists["p0"].push_back(p0_[i].cpu());
    }
    s.scalars = {{"d", d_}, {"d_max", d_max_}, {"d_numerator", d_numerator_}, {"d_hat", d_hat_}};
    return s;
}

void Prodigy::load_state(const OptimizerState& state) {
    check_optimizer_state(state, "prodigy", {"exp_avg", "exp_avg_sq", "s", "p0"}, params_.size());
    for (const char* name : {"d", "d_max", "d_numerator", "d_hat"}) {
        if (state.scalars.count(name) == 0) {
            throw Error(std::string("Prodigy's optimizer state has no '") + name + "'");
        }
    }
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params_.size(); ++i) {
        const at::Tensor& m = state.lists.at("exp_avg")[i];
        const at::Tensor& v = state.lists.at("exp_avg_sq")[i];
        const at::Tensor& s = state.lists.at("s")[i];
        const at::Tensor& p0 = state.lists.at("p0")[i];
        if (m.sizes() != exp_avg_[i].sizes() || v.sizes() != exp_avg_sq_[i].sizes() ||
            s.sizes() != s_[i].sizes() || (p0.dim() != 0 && p0.numel() != s_[i].numel())) {
            throw Error("Prodigy's optimizer state of parameter " + std::to_string(i) +
                        " does not match the parameter's shape");
        }
        exp_avg_[i].copy_(m);
        exp_avg_sq_[i].copy_(v);
        s_[i].copy_(s);
        p0_[i] = p0.to(s_[i].options()).clone();  // a 0-dim zero or the flat initial weights
    }
    d_ = state.scalars.at("d");
    d_max_ = state.scalars.at("d_max");
    d_numerator_ = state.scalars.at("d_numerator");
    d_hat_ = state.scalars.at("d_hat");
    k_ = state.steps;
}

std::uint64_t Prodigy::state_bytes() const {
    std::uint64_t bytes = 0;
    for (std::size_t i = 0; i < params_.size(); ++i) {
        bytes += exp_avg_[i].nbytes() + exp_avg_sq_[i].nbytes() + s_[i].nbytes() + p0_[i].nbytes();
    }
    return bytes;
}

}  // namespace loom
