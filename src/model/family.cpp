#include "loom/model/family.h"

#include "loom/core/error.h"
#include "loom/model/chroma/chroma_family.h"
#include "loom/model/family_registry.h"
#include "loom/model/flux/flex2_channels.h"
#include "loom/model/flux/flux_family.h"
#include "loom/model/loading/diffusers_folder.h"
#include "loom/model/qwenimage/qwenimage_family.h"
#include "loom/model/sd/sd_family.h"
#include "loom/model/sd/single_file.h"
#include "loom/model/sd/stable_diffusion.h"
#include "loom/model/text/clip_text_model.h"
#include "loom/model/wan/wan_family.h"
#include "loom/model/wan22/wan22_family.h"
#include "loom/model/zimage/zimage_family.h"

namespace loom {

const std::vector<FamilyEntry>& family_table() {
    static const std::vector<FamilyEntry> table = {
        {config::FamilyKind::kStableDiffusion, StableDiffusionFamily::load,
         StableDiffusionFamily::declared_blocks, StableDiffusionFamily::eval_components},
        {config::FamilyKind::kFlux, FluxFamily::load, FluxFamily::declared_blocks,
         FluxFamily::eval_components},
        {config::FamilyKind::kWan, WanFamily::load, WanFamily::declared_blocks,
         WanFamily::eval_components},
        {config::FamilyKind::kWan22, Wan22Family::load, Wan22Family::declared_blocks,
         Wan22Family::eval_components},
        {config::FamilyKind::kChroma, ChromaFamily::load, ChromaFamily::declared_blocks,
         ChromaFamily::eval_components},
        {config::FamilyKind::kZImage, ZImageFamily::load, ZImageFamily::declared_blocks,
         ZImageFamily::eval_components},
        {config::FamilyKind::kQwenImage, QwenImageFamily::load, QwenImageFamily::declared_blocks,
         QwenImageFamily::eval_components},
    };
    return table;
}

TextConditioning ModelFamily::encode_prompts_with_controls(
    const std::vector<std::string>&, const std::vector<std::vector<at::Tensor>>&) {
    throw Error(std::string(config::arch_info(arch()).display_name) +
                " does not read control images in its prompts");
}

const FamilyEntry& family_entry(config::FamilyKind kind) {
    for (const FamilyEntry& e : family_table()) {
        if (e.kind == kind) return e;
    }
    throw Error(std::string("no family row for ") + config::to_string(kind));
}

config::Arch detect_arch(const DiffusersFolder& folder) {
    const std::vector<config::Arch> archs = config::archs_of_pipeline(folder.pipeline_class);
    if (archs.empty()) {
        throw FormatError((folder.root / "model_index.json").string(),
                          "pipeline class '" + folder.pipeline_class + "' is not one loom loads (" +
                              config::pipeline_class_list() + ")");
    }
    if (archs.front() == config::Arch::kWan21) {
        // WanPipeline: Wan 2.2 14B lists its low-noise expert as transformer_2 (Wan 2.1's
        // model_index.json has it null, or not at all).
        return folder.has("transformer_2") ? config::Arch::kWan22_14b : config::Arch::kWan21;
    }
    if (archs.front() == config::Arch::kFlux) {
        // FluxPipeline: Flex.2's transformer takes its inpaint and control channels too. A folder
        // without its transformer's config is Flux's, refused by the loader naming what is missing.
        const std::filesystem::path transformer = folder.root / "transformer" / "config.json";
        std::error_code ec;
        return std::filesystem::exists(transformer, ec) &&
                       is_flex2_transformer(read_flux_config(transformer))
                   ? config::Arch::kFlex2
                   : config::Arch::kFlux;
    }
    if (archs.front() != config::Arch::kSd1) return archs.front();
    // StableDiffusionPipeline: SD 1.x's CLIP ViT-L is 768 wide, SD 2.x's OpenCLIP ViT-H 1024.
    const CLIPTextConfig te =
        read_clip_text_config(folder.dir("text_encoder") / "config.json", false);
    return te.hidden_size == 1024 ? config::Arch::kSd2 : config::Arch::kSd1;
}

config::Arch detect_model_arch(const std::filesystem::path& root) {
    // A file is an SD 1.x / SDXL checkpoint in the original single-file layout.
    if (is_single_file_checkpoint(root)) return detect_single_file_arch(root);
    return detect_arch(read_diffusers_folder(root));
}

std::unique_ptr<ModelFamily> load_model_family(const std::filesystem::path& root,
                                               const FamilyLoadOptions& options) {
    const config::Arch arch = detect_model_arch(root);
    return family_entry(config::arch_info(arch).family).load(root, arch, options);
}

}  // namespace loom
