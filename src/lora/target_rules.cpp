#include "loom/lora/target_rules.h"

#include <algorithm>

namespace loom {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool contains_any(const std::string& s, const std::vector<std::string>& parts) {
    return std::any_of(parts.begin(), parts.end(),
                       [&](const std::string& p) { return s.find(p) != std::string::npos; });
}

// Linear layers (and the 1x1 convs standing in for them) inside a Transformer2DModel.
bool is_transformer_projection(const std::string& path) {
    if (path.find(".attentions.") == std::string::npos) return false;
    static const char* const kSuffixes[] = {".to_q",          ".to_k",     ".to_v",    ".to_out.0",
                                            ".ff.net.0.proj", ".ff.net.2", ".proj_in", ".proj_out"};
    return std::any_of(std::begin(kSuffixes), std::end(kSuffixes),
                       [&](const char* suffix) { return ends_with(path, suffix); });
}

bool is_block_conv(const std::string& path) {
    const bool in_block = path.find(".resnets.") != std::string::npos ||
                          path.find(".downsamplers.") != std::string::npos ||
                          path.find(".upsamplers.") != std::string::npos;
    return in_block &&
           (ends_with(path, ".conv1") || ends_with(path, ".conv2") || ends_with(path, ".conv"));
}

bool is_flux_block_linear(const std::string& path) {
    return path.rfind("transformer_blocks.", 0) == 0 ||
           path.rfind("single_transformer_blocks.", 0) == 0;
}

}  // namespace

const char* lora_file_prefix(LoRAModel model) {
    return model == LoRAModel::kFluxTransformer ? "transformer" : "unet";
}

bool is_lora_target(const std::string& path, LayerKind kind, const TargetRules& rules) {
    bool selected = false;
    if (rules.model == LoRAModel::kFluxTransformer) {
        selected = kind == LayerKind::kLinear && is_flux_block_linear(path);
    } else if (kind == LayerKind::kConv3x3) {
        selected = rules.conv && is_block_conv(path);
    } else {
        selected = is_transformer_projection(path);
    }
    if (!selected) return false;
    if (!rules.only_if_contains.empty() && !contains_any(path, rules.only_if_contains))
        return false;
    return !contains_any(path, rules.ignore_if_contains);
}

std::string kohya_name(const std::string& module_path) {
    std::string name = "lora_unet_" + module_path;
    std::replace(name.begin() + 10, name.end(), '.', '_');
    return name;
}

}  // namespace loom
