#pragma once

// Which modules of a UNet get a LoRA (pure logic, no torch). By default the modules kohya's
// Transformer2DModel target covers: attention projections (to_q, to_k, to_v, to_out.0), the
// feed-forward (ff.net.0.proj, ff.net.2) and proj_in / proj_out. 3x3 convolutions of resnets,
// downsamplers and upsamplers only when `network.conv` is set. Then ai-toolkit's filters:
// `only_if_contains` keeps names containing any of its strings, `ignore_if_contains` drops names
// containing any of its strings, and ignore wins.

#include <string>
#include <vector>

namespace loom {

enum class LayerKind { kLinear, kConv1x1, kConv3x3 };

struct TargetRules {
    bool conv = false;  // target 3x3 convolutions too
    std::vector<std::string> only_if_contains;
    std::vector<std::string> ignore_if_contains;
};

// `module_path` is the diffusers module name, e.g. "down_blocks.1.attentions.0.proj_in".
bool is_lora_target(const std::string& module_path, LayerKind kind, const TargetRules& rules);

// kohya's key stem for a UNet module: "lora_unet_" + path with '.' replaced by '_'.
std::string kohya_name(const std::string& module_path);

}  // namespace loom
