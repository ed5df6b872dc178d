#include "loom/lora/target_rules.h"

#include <algorithm>
#include <utility>

#include "loom/model/family_registry.h"

namespace loom {

namespace {

bool contains_any(const std::string& s, const std::vector<std::string>& parts) {
    return std::any_of(parts.begin(), parts.end(),
                       [&](const std::string& p) { return s.find(p) != std::string::npos; });
}

// Inside a Transformer2DModel (kohya's UNET_TARGET_REPLACE_MODULE).
bool in_transformer_2d(const std::string& path) {
    return path.find(".attentions.") != std::string::npos;
}

// Inside a ResnetBlock2D, Downsample2D or Upsample2D (kohya's conv-mode modules).
bool in_resnet_or_sampler(const std::string& path) {
    return path.find(".resnets.") != std::string::npos ||
           path.find(".downsamplers.") != std::string::npos ||
           path.find(".upsamplers.") != std::string::npos;
}

bool is_unet_target(const std::string& path, LayerKind kind, const TargetRules& rules) {
    const bool conv3x3 = kind == LayerKind::kConv3x3;
    if (rules.unet_set == UNetModuleSet::kAiToolkit) return !conv3x3 || rules.conv;
    if (conv3x3) return rules.conv && in_resnet_or_sampler(path);
    return in_transformer_2d(path) || (rules.conv && in_resnet_or_sampler(path));
}

}  // namespace

LoRAModel lora_model_of(config::Arch arch) {
    const config::ArchInfo& row = config::arch_info(arch);
    LoRAModel model{family_entry(row.family).blocks(), row.lora_prefix, row.lora_module_names, {}};
    // Wan LoRAs come in two layouts: ai-toolkit's and ComfyUI's original names under
    // "diffusion_model.", which loom writes, and diffusers' names under "transformer.".
    if (row.lora_module_names == config::LoRAModuleNames::kWanOriginal) {
        model.also_reads.push_back({"transformer", config::LoRAModuleNames::kDiffusers});
    }
    return model;
}

LoRAModel lora_model_reading(const LoRAModel& model, const std::vector<std::string>& keys) {
    const auto any_under = [&](const std::string& prefix) {
        return std::any_of(keys.begin(), keys.end(), [&](const std::string& k) {
            return k.size() > prefix.size() && k.compare(0, prefix.size(), prefix) == 0 &&
                   k[prefix.size()] == '.';
        });
    };
    if (any_under(model.file_prefix)) return model;
    for (const LoRAFileNaming& naming : model.also_reads) {
        if (!any_under(naming.prefix)) continue;
        LoRAModel read = model;
        read.file_prefix = naming.prefix;
        read.module_names = naming.names;
        return read;
    }
    return model;
}

LoRAModel with_trained_experts(LoRAModel model, const std::vector<bool>& trained) {
    if (model.blocks.experts.empty() || trained.empty()) return model;
    std::vector<DenoiserExpert> kept;
    for (std::size_t i = 0; i < model.blocks.experts.size(); ++i) {
        if (i < trained.size() && trained[i]) kept.push_back(model.blocks.experts[i]);
    }
    std::vector<std::string> prefixes;
    for (const std::string& prefix : model.blocks.prefixes) {
        for (const DenoiserExpert& e : kept) {
            if (prefix.compare(0, e.module_prefix.size(), e.module_prefix) == 0) {
                prefixes.push_back(prefix);
                break;
            }
        }
    }
    model.blocks.prefixes = std::move(prefixes);
    model.blocks.experts = std::move(kept);
    return model;
}

LoRAModel lora_model_of(const config::ProcessConfig& process) {
    return with_trained_experts(
        lora_model_of(process.choices.arch.value_or(config::Arch::kSd1)),
        {process.model.model_kwargs.train_high_noise, process.model.model_kwargs.train_low_noise});
}

std::vector<std::string> lora_file_suffixes(const LoRAModel& model) {
    if (model.blocks.experts.empty()) return {""};
    std::vector<std::string> out;
    for (const DenoiserExpert& e : model.blocks.experts) out.push_back(e.file_suffix);
    return out;
}

std::optional<UNetModuleSet> parse_unet_module_set(const std::string& name) {
    if (name == "ai-toolkit") return UNetModuleSet::kAiToolkit;
    if (name == "kohya") return UNetModuleSet::kKohya;
    return std::nullopt;
}

bool is_lora_target(const std::string& path, LayerKind kind, const TargetRules& rules) {
    bool selected = false;
    switch (rules.model.blocks.lora_targeting) {
        case LoRATargeting::kBlockLinears:
            selected = kind == LayerKind::kLinear && rules.model.blocks.contains(path);
            break;
        case LoRATargeting::kUNetModuleSets: selected = is_unet_target(path, kind, rules); break;
    }
    if (!selected) return false;
    if (!rules.only_if_contains.empty() && !contains_any(path, rules.only_if_contains))
        return false;
    return !contains_any(path, rules.ignore_if_contains);
}

std::string kohya_name(const std::string& module_path) {
    static const std::pair<const char*, const char*> kSgmNames[] = {
        {"add_embedding.linear_1", "label_emb.0.0"}, {"add_embedding.linear_2", "label_emb.0.2"}};
    std::string path = module_path;
    for (const auto& [diffusers, sgm] : kSgmNames) {
        if (path == diffusers) path = sgm;
    }
    std::string name = "lora_unet_" + path;
    std::replace(name.begin() + 10, name.end(), '.', '_');
    return name;
}

}  // namespace loom
