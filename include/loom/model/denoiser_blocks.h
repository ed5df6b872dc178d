#pragma once

// A denoiser's repeated blocks, declared once by its family (ModelFamily::blocks()) and read by
// the generic machinery: low_vram's third level streams the weights inside them from the host
// (train/low_vram.h), and a LoRA targets the Linears inside them (lora/target_rules.h), as
// diffusers' models declare `_repeated_blocks` / `_no_split_modules` once for offloading and
// ai-toolkit's models list their transformer block names for LoRA. Pure data, no torch.

#include <string>
#include <vector>

namespace loom {

// How a LoRA network picks its modules in this denoiser.
enum class LoRATargeting {
    // A UNet: ai-toolkit's or kohya's module set, 3x3 convolutions with network.conv
    // (lora/target_rules.h); saved in the kohya or the PEFT layout.
    kUNetModuleSets,
    // A transformer: every Linear inside the blocks; saved in the PEFT layout.
    kBlockLinears,
};

// One expert of a denoiser made of several (Wan 2.2 14B: the high-noise transformer and the
// low-noise one): the submodule it is, and what its own LoRA file's name adds to the run's
// (ai-toolkit's "<name>_high_noise.safetensors").
struct DenoiserExpert {
    std::string module_prefix;  // "transformer_1.", ending in '.'
    std::string file_suffix;    // "_high_noise"
};

struct DenoiserBlocks {
    // Module-path prefixes of the blocks ("transformer_blocks.", "blocks."), each ending in '.'.
    std::vector<std::string> prefixes;
    LoRATargeting lora_targeting = LoRATargeting::kBlockLinears;
    // Empty for one denoiser (one LoRA file); else every expert, in the family's order: each
    // block lies inside one, and each trained expert's LoRA is saved in its own file.
    std::vector<DenoiserExpert> experts;

    // Whether `module_path` (a path inside the denoiser) lies inside one of the blocks.
    bool contains(const std::string& module_path) const {
        for (const std::string& p : prefixes) {
            if (module_path.compare(0, p.size(), p) == 0) return true;
        }
        return false;
    }
    // The expert `module_path` lies in; nullptr without experts or outside them.
    const DenoiserExpert* expert_of(const std::string& module_path) const {
        for (const DenoiserExpert& e : experts) {
            if (module_path.compare(0, e.module_prefix.size(), e.module_prefix) == 0) return &e;
        }
        return nullptr;
    }
};

}  // namespace loom
