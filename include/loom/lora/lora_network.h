#pragma once

// The set of LoRAs attached to a UNet or a Flux transformer: created by name rules
// (target_rules.h), trained as one parameter list, merged into or removed from the base, and saved
// or loaded as a file (lora_file.h).

#include <torch/nn/module.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/lora/lora_adapter.h"
#include "loom/lora/target_rules.h"

namespace loom {

struct LoRANetworkOptions {
    LoRAOptions linear;               // rank `network.linear`, alpha `network.linear_alpha`
    std::optional<LoRAOptions> conv;  // `network.conv` / `conv_alpha`: 3x3 convs too
    TargetRules rules;                // only_if_contains / ignore_if_contains (conv set above)
};

struct LoRATarget {
    std::string path;                         // diffusers module path
    std::shared_ptr<torch::nn::Module> base;  // the LinearImpl or Conv2dImpl it adapts
    std::shared_ptr<LoRAAdapter> adapter;
};

class LoRANetwork {
  public:
    // Attaches a LoRA to every target module of `model`. Throws loom::Error when no module
    // matches (e.g. a too narrow only_if_contains).
    static LoRANetwork inject(torch::nn::Module& model, const LoRANetworkOptions& options);
    // Attaches a LoRA with the given options to each named module (a file's own layout, see
    // lora_file.h load_lora_network). Throws loom::Error naming a path that is not a Linear or
    // Conv2d of `model`.
    static LoRANetwork attach_at(torch::nn::Module& model,
                                 const std::map<std::string, LoRAOptions>& per_module,
                                 const LoRAModel& target_model = lora_model_of(config::Arch::kSd1));
    ~LoRANetwork();
    LoRANetwork(LoRANetwork&&) noexcept = default;
    LoRANetwork& operator=(LoRANetwork&&) noexcept = default;

    const std::vector<LoRATarget>& targets() const { return targets_; }
    const LoRATarget* find(const std::string& path) const;
    // The model the network is for (its file prefix and layouts, lora_file.h).
    const LoRAModel& target_model() const { return target_model_; }
    // Every trainable tensor (down and up of each LoRA), in target order.
    std::vector<at::Tensor> parameters() const;

    void set_multiplier(double multiplier);
    void set_training(bool training);

    // Folds every LoRA into its base weight (and detaches the adapters so the output is
    // unchanged); unmerge() restores the base weights and re-attaches them.
    void merge();
    void unmerge();
    bool merged() const { return merged_; }

    // Detaches all adapters from the model (the network keeps its weights).
    void detach();

  private:
    LoRANetwork() = default;
    std::vector<LoRATarget> targets_;
    LoRAModel target_model_;
    bool merged_ = false;
    bool attached_ = true;
};

}  // namespace loom
