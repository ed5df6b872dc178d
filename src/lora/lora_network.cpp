#include "loom/lora/lora_network.h"

#include <ATen/ATen.h>

#include "loom/core/error.h"

namespace loom {

namespace {

void attach(const LoRATarget& t, std::shared_ptr<LayerAdapter> adapter) {
    if (auto* linear = dynamic_cast<LinearImpl*>(t.base.get())) {
        linear->set_adapter(std::move(adapter));
    } else if (auto* conv = dynamic_cast<Conv2dImpl*>(t.base.get())) {
        conv->set_adapter(std::move(adapter));
    }
}

at::Tensor& base_weight(const LoRATarget& t) {
    if (auto* linear = dynamic_cast<LinearImpl*>(t.base.get())) return linear->weight;
    return dynamic_cast<Conv2dImpl*>(t.base.get())->weight;
}

}  // namespace

LoRANetwork LoRANetwork::inject(torch::nn::Module& model, const LoRANetworkOptions& options) {
    LoRANetwork net;
    net.target_model_ = options.rules.model;
    TargetRules rules = options.rules;
    rules.conv = options.conv.has_value();
    for (const auto& item : model.named_modules("", /*include_self=*/false)) {
        const std::string& path = item.key();
        const std::shared_ptr<torch::nn::Module>& module = item.value();
        std::shared_ptr<LoRAAdapter> adapter;
        if (auto linear = std::dynamic_pointer_cast<LinearImpl>(module)) {
            if (is_lora_target(path, LayerKind::kLinear, rules)) {
                adapter = LoRAAdapter::for_linear(*linear, options.linear);
            }
        } else if (auto conv = std::dynamic_pointer_cast<Conv2dImpl>(module)) {
            const bool one_by_one = conv->kernel_size() == 1;
            const LayerKind kind = one_by_one ? LayerKind::kConv1x1 : LayerKind::kConv3x3;
            if (is_lora_target(path, kind, rules)) {
                adapter = LoRAAdapter::for_conv(*conv, one_by_one ? options.linear : *options.conv);
            }
        }
        if (!adapter) continue;
        LoRATarget target{path, module, adapter};
        attach(target, adapter);
        net.targets_.push_back(std::move(target));
    }
    if (net.targets_.empty()) {
        throw Error(
            "no module of the model matches the LoRA target rules (check "
            "network_kwargs.only_if_contains / ignore_if_contains)");
    }
    return net;
}

LoRANetwork LoRANetwork::attach_at(torch::nn::Module& model,
                                   const std::map<std::string, LoRAOptions>& per_module,
                                   const LoRAModel& target_model) {
    LoRANetwork net;
    net.target_model_ = target_model;
    std::map<std::string, std::shared_ptr<torch::nn::Module>> modules;
    for (const auto& item : model.named_modules("", false)) modules[item.key()] = item.value();
    for (const auto& [path, options] : per_module) {
        auto it = modules.find(path);
        std::shared_ptr<LoRAAdapter> adapter;
        if (it != modules.end()) {
            if (auto linear = std::dynamic_pointer_cast<LinearImpl>(it->second)) {
                adapter = LoRAAdapter::for_linear(*linear, options);
            } else if (auto conv = std::dynamic_pointer_cast<Conv2dImpl>(it->second)) {
                adapter = LoRAAdapter::for_conv(*conv, options);
            }
        }
        if (!adapter) throw Error("the model has no Linear or Conv2d named '" + path + "'");
        LoRATarget target{path, it->second, adapter};
        attach(target, adapter);
        net.targets_.push_back(std::move(target));
    }
    return net;
}

LoRANetwork::~LoRANetwork() {
    if (!targets_.empty() && attached_ && !merged_) detach();
}

const LoRATarget* LoRANetwork::find(const std::string& path) const {
    for (const LoRATarget& t : targets_) {
        if (t.path == path) return &t;
    }
    return nullptr;
}

std::vector<at::Tensor> LoRANetwork::parameters() const {
    std::vector<at::Tensor> out;
    for (const LoRATarget& t : targets_) {
        out.push_back(t.adapter->down);
        out.push_back(t.adapter->up);
    }
    return out;
}

void LoRANetwork::set_multiplier(double multiplier) {
    for (const LoRATarget& t : targets_) t.adapter->multiplier = multiplier;
}

void LoRANetwork::set_training(bool training) {
    for (const LoRATarget& t : targets_) t.adapter->training = training;
}

void LoRANetwork::merge() {
    if (merged_) return;
    torch::NoGradGuard no_grad;
    for (const LoRATarget& t : targets_) {
        at::Tensor& w = base_weight(t);
        w.add_(t.adapter->delta_weight().to(w.device(), w.scalar_type()));
        attach(t, nullptr);
    }
    merged_ = true;
}

void LoRANetwork::unmerge() {
    if (!merged_) return;
    torch::NoGradGuard no_grad;
    for (const LoRATarget& t : targets_) {
        at::Tensor& w = base_weight(t);
        w.sub_(t.adapter->delta_weight().to(w.device(), w.scalar_type()));
        if (attached_) attach(t, t.adapter);
    }
    merged_ = false;
}

void LoRANetwork::detach() {
    for (const LoRATarget& t : targets_) attach(t, nullptr);
    attached_ = false;
}

}  // namespace loom
