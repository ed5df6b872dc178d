#include "loom/train/optimizer.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "loom/config/job.h"
#include "loom/core/error.h"
#include "loom/train/adamw.h"
#include "loom/train/adamw_8bit.h"
#include "loom/train/prodigy.h"

namespace loom {

void Optimizer::zero_grad() {
    for (at::Tensor& p : params_) p.mutable_grad() = at::Tensor();
}

double Optimizer::clip_grad_norm(double max_norm) {
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

std::unique_ptr<Optimizer> make_optimizer(const config::TrainConfig& train,
                                          std::vector<at::Tensor> params, bool fused) {
    const config::OptimizerParams& o = train.optimizer_params;
    const std::string& name = train.optimizer;
    if (name == "adamw8bit") {
        AdamW8bitOptions a;
        a.beta1 = o.betas.at(0);
        a.beta2 = o.betas.at(1);
        a.eps = o.eps;
        a.weight_decay = o.weight_decay.value_or(a.weight_decay);
        return std::make_unique<AdamW8bit>(std::move(params), a);
    }
    if (name == "prodigy" || name == "prodigyopt") {
        ProdigyOptions p;
        p.beta1 = o.betas.at(0);
        p.beta2 = o.betas.at(1);
        p.beta3 = o.beta3;
        p.eps = o.eps;
        p.weight_decay = o.weight_decay.value_or(p.weight_decay);
        p.decouple = o.decouple;
        p.use_bias_correction = o.use_bias_correction;
        p.safeguard_warmup = o.safeguard_warmup;
        p.d0 = o.d0;
        p.d_coef = o.d_coef;
        p.growth_rate = o.growth_rate.value_or(p.growth_rate);
        return std::make_unique<Prodigy>(std::move(params), p);
    }
    // adamw, adam, and the values the config warns about and trains with AdamW.
    AdamWOptions a;
    a.beta1 = o.betas.at(0);
    a.beta2 = o.betas.at(1);
    a.eps = o.eps;
    a.weight_decay = o.weight_decay.value_or(a.weight_decay);
    a.fused = fused;
    return std::make_unique<AdamW>(std::move(params), a);
}

void check_optimizer_state(const OptimizerState& state, const std::string& kind,
                           const std::vector<std::string>& lists, std::size_t count) {
    if (state.kind != kind) {
        throw Error("the checkpoint's optimizer state is " + state.kind +
                    "'s, the job trains with " + kind +
                    " (train.optimizer changed since it was saved; use --fresh to start "
                    "over, or set it back)");
    }
    for (const std::string& name : lists) {
        const auto it = state.lists.find(name);
        const std::size_t have = it == state.lists.end() ? 0 : it->second.size();
        if (have != count) {
            throw Error("optimizer state '" + name + "' has " + std::to_string(have) +
                        " tensors, the network has " + std::to_string(count));
        }
    }
}

}  // namespace loom
