#include "loom/train/ema.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "loom/core/error.h"

namespace loom {

Ema::Ema(const std::vector<at::Tensor>& params, double decay) : decay_(decay) {
    for (const at::Tensor& p : params) shadow_.push_back(p.detach().clone());
}

void Ema::update(const std::vector<at::Tensor>& params) {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params.size(); ++i) {
        shadow_[i].mul_(decay_).add_(params[i].detach(), 1.0 - decay_);
    }
}

void Ema::swap(const std::vector<at::Tensor>& params) {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params.size(); ++i) {
        at::Tensor live = params[i].detach().clone();
        params[i].detach().copy_(shadow_[i]);
        shadow_[i].copy_(live);
    }
}

void Ema::load(const std::vector<at::Tensor>& shadow) {
    if (shadow.size() != shadow_.size()) throw Error("EMA state does not match the network");
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < shadow.size(); ++i) shadow_[i].copy_(shadow[i]);
}

}  // namespace loom
