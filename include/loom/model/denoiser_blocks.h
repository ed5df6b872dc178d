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

struct DenoiserBlocks {
    // Module-path prefixes of the blocks ("transformer_blocks.", "blocks."), each ending in '.'.
    std::vector<std::string> prefixes;
    LoRATargeting lora_targeting = LoRATargeting::kBlockLinears;

    // Whether `module_path` (a path inside the denoiser) lies inside one of the blocks.
    bool contains(const std::string& module_path) const {
        for (const std::string& p : prefixes) {
            if (module_path.compare(0, p.size(), p) == 0) return true;
        }
        return false;
    }
};

}  // namespace loom
