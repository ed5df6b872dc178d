#pragma once

// Which modules of a model get a LoRA (pure logic, no torch).
//
// A UNet (SD 1.x / SDXL): by default the modules kohya's
// Transformer2DModel target covers: attention projections (to_q, to_k, to_v, to_out.0), the
// feed-forward (ff.net.0.proj, ff.net.2) and proj_in / proj_out. 3x3 convolutions of resnets,
// downsamplers and upsamplers only when `network.conv` is set. Then ai-toolkit's filters:
// `only_if_contains` keeps names containing any of its strings, `ignore_if_contains` drops names
// containing any of its strings, and ignore wins.
//
// Flux's transformer: every Linear inside its double- and single-stream blocks, as ai-toolkit
// targets FluxTransformer2DModel with transformer_only (attention projections, the adaLN
// modulation linears, the MLPs); the embedders and the output layers outside the blocks are
// not. The same filters apply.

#include <string>
#include <vector>

namespace loom {

enum class LayerKind { kLinear, kConv1x1, kConv3x3 };

// The model a LoRA network is for: which modules it targets and its file prefix.
enum class LoRAModel { kUNet, kFluxTransformer };

// "unet" / "transformer": the component name of PEFT-layout keys ("transformer.<path>.lora_A").
const char* lora_file_prefix(LoRAModel model);

struct TargetRules {
    LoRAModel model = LoRAModel::kUNet;
    bool conv = false;  // target 3x3 convolutions too (UNet only)
    std::vector<std::string> only_if_contains;
    std::vector<std::string> ignore_if_contains;
};

// `module_path` is the diffusers module name, e.g. "down_blocks.1.attentions.0.proj_in".
bool is_lora_target(const std::string& module_path, LayerKind kind, const TargetRules& rules);

// kohya's key stem for a UNet module: "lora_unet_" + path with '.' replaced by '_'.
std::string kohya_name(const std::string& module_path);

}  // namespace loom
