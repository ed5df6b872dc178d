#pragma once

// Which modules of a model get a LoRA (pure logic, no torch).
//
// A UNet (SD 1.x / SDXL), two module sets (`network.network_kwargs.module_set`):
//  - ai-toolkit (the default, as ai-toolkit's LoRASpecialNetwork targets UNet2DConditionModel):
//    every Linear and 1x1 Conv2d of the whole UNet at the linear rank — attention and
//    feed-forward, proj_in/out, but also the time embedding, SDXL's added-condition embedding,
//    each resnet's time_emb_proj and conv_shortcut — and with `network.conv` every 3x3 Conv2d at
//    the conv rank, conv_in and conv_out included.
//  - kohya (sd-scripts' networks/lora.py): the Linear and 1x1 layers inside the
//    Transformer2DModels (attentions); with `network.conv`, also everything inside the
//    ResnetBlock2D, Downsample2D and Upsample2D modules — their 3x3 convs at the conv rank, their
//    Linear and 1x1 layers (time_emb_proj, conv_shortcut) at the linear rank. Never conv_in,
//    conv_out or the embeddings.
// Then ai-toolkit's filters: `only_if_contains` keeps names containing any of its strings,
// `ignore_if_contains` drops names containing any of its strings, and ignore wins.
//
// A transformer (Flux, Wan): every Linear inside the blocks its family declares
// (ModelFamily::blocks, model/denoiser_blocks.h), as ai-toolkit targets a transformer by its
// block names — Flux's double- and single-stream blocks with transformer_only, Wan's ['blocks']
// — so the embedders and the output layers outside them get none. The same filters apply.

#include <optional>
#include <string>
#include <vector>

#include "loom/config/arch.h"
#include "loom/config/job.h"
#include "loom/model/denoiser_blocks.h"

namespace loom {

enum class LayerKind { kLinear, kConv1x1, kConv3x3 };

// The denoiser a LoRA network is for: where its targets are (its family's blocks) and the
// component name of its PEFT-layout keys (the arch row's lora_prefix: "unet.<path>.lora_A",
// "transformer.<path>.lora_A").
// How a file names a denoiser's modules: its key prefix and the module names after it.
struct LoRAFileNaming {
    std::string prefix;
    config::LoRAModuleNames names = config::LoRAModuleNames::kDiffusers;
};

struct LoRAModel {
    DenoiserBlocks blocks;
    std::string file_prefix;
    // How the file names the modules (the arch row's; lora/lora_file_names.h).
    config::LoRAModuleNames module_names = config::LoRAModuleNames::kDiffusers;
    // Other namings loom reads (never writes) for this model: a Wan LoRA in diffusers' names
    // under "transformer." — diffusers' own layout, and what loom wrote for Wan 2.1 before it
    // wrote ai-toolkit's (issue 63). A file is read in the naming its keys' prefix names.
    std::vector<LoRAFileNaming> also_reads;
    // kohya keys (lora_unet_...) name a UNet's modules only.
    bool has_kohya_keys() const { return blocks.lora_targeting == LoRATargeting::kUNetModuleSets; }
};

// The LoRA model of an arch: its family's declared blocks (model/family_registry.h) and its
// row's LoRA prefix and module names.
LoRAModel lora_model_of(config::Arch arch);

// `model` naming its modules as a file whose keys are `keys` does: its own naming, or the first
// of `also_reads` whose prefix a key starts with. `model` itself when none matches (the file's
// keys are then reported as unknown by the reader).
LoRAModel lora_model_reading(const LoRAModel& model, const std::vector<std::string>& keys);

// `model` with a LoRA for the experts `trained` says train only (by index into
// model.blocks.experts; Wan 2.2's model_kwargs): the others' blocks get no LoRA and no file. A
// model without experts, or an empty `trained`, is returned as it is.
LoRAModel with_trained_experts(LoRAModel model, const std::vector<bool>& trained);

// What a job's process trains: its arch's LoRA model with the experts its model_kwargs train.
LoRAModel lora_model_of(const config::ProcessConfig& process);

// What each file of the model's LoRA adds to the run's name: {""} for one file, else each
// expert's suffix ("_high_noise", "_low_noise").
std::vector<std::string> lora_file_suffixes(const LoRAModel& model);

// The UNet module sets above.
enum class UNetModuleSet { kAiToolkit, kKohya };

// "ai-toolkit" / "kohya" (the config's spelling); nullopt for anything else.
std::optional<UNetModuleSet> parse_unet_module_set(const std::string& name);

struct TargetRules {
    LoRAModel model = lora_model_of(config::Arch::kSd1);
    UNetModuleSet unet_set = UNetModuleSet::kAiToolkit;
    bool conv = false;  // target 3x3 convolutions too (UNet only)
    std::vector<std::string> only_if_contains;
    std::vector<std::string> ignore_if_contains;
};

// `module_path` is the diffusers module name, e.g. "down_blocks.1.attentions.0.proj_in".
bool is_lora_target(const std::string& module_path, LayerKind kind, const TargetRules& rules);

// kohya's key stem for a UNet module: "lora_unet_" + path with '.' replaced by '_'. SDXL's
// added-condition embedding (add_embedding.linear_1/2) takes its sgm name, label_emb_0_0/0_2:
// diffusers' kohya converter reads that one (its SDXL rules mangle add_embedding_linear_N) and
// ComfyUI maps both.
std::string kohya_name(const std::string& module_path);

}  // namespace loom
