#pragma once

// One row per model family: what the generic code needs of a family before (or without)
// loading a model — how to load its folders, its denoiser's blocks, the components `loom eval`
// runs. The arch table (config/arch.h) names each arch's family; this table is the only place
// that names each family's class, so adding a family is its folder plus one row here.

#include <filesystem>
#include <memory>
#include <vector>

#include "loom/config/arch.h"
#include "loom/model/component_eval.h"
#include "loom/model/denoiser_blocks.h"
#include "loom/model/family.h"

namespace loom {

struct FamilyEntry {
    config::FamilyKind kind;
    // Every component of a diffusers folder of `arch` (one of this family's) in host memory.
    std::unique_ptr<ModelFamily> (*load)(const std::filesystem::path& root, config::Arch arch,
                                         const FamilyLoadOptions& options);
    // The denoiser's blocks (model/denoiser_blocks.h), as ModelFamily::blocks gives them.
    const DenoiserBlocks& (*blocks)();
    // What `loom eval` can run for a folder of this family.
    const std::vector<EvalComponent>& (*eval_components)();
};

// The row of `kind`.
const FamilyEntry& family_entry(config::FamilyKind kind);
const std::vector<FamilyEntry>& family_table();

}  // namespace loom
