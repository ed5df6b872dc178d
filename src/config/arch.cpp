#include "loom/config/arch.h"

#include <algorithm>
#include <iterator>

namespace loom::config {

namespace {

// ai-toolkit's arch strings that loom does not build (reference/ai-toolkit.md §0), in its order.
constexpr const char* kOtherAiToolkitArchs[] = {
    "sd3",
    "pixart",
    "pixart_sigma",
    "auraflow",
    "flex1",
    "lumina2",
    "vega",
    "ssd",
    "wan21_i2v",
    "wan22_14b_i2v",
    "wan22_5b",
    "cogview4",
    "chroma_radiance",
    "hidream",
    "hidream_e1",
    "hidream_o1",
    "flux2",
    "flux2_klein_4b",
    "flux2_klein_9b",
    "omnigen2",
    "f-lite",
    "zimage_l2p",
    "ltx2",
    "ltx2.3",
    "ltx2.5",
    "zeta_chroma",
    "ernie_image",
    "nucleus_image",
    "anima",
    "ideogram4",
    "prx_pixel",
    "krea2",
    "boogu_image",
    "boogu_image_edit",
    "mageflow",
    "mageflow_edit",
    "minimax_h3",
    "minimax_h3_ref2va",
    "ace_step_15",
    "ace_step_15_xl",
};

}  // namespace

const std::vector<ArchInfo>& arch_table() {
    using F = FamilyKind;
    using G = GuidanceKind;
    using N = LoRAModuleNames;
    // clang-format off
    static const std::vector<ArchInfo> kTable = {
        // arch          name     display name            family              pipeline class               train  video  bucket two TE  guidance               scale flow   kohya base model   kohya network module   LoRA prefix        LoRA module names
        {Arch::kSd1,   "sd1",   "Stable Diffusion 1.x", F::kStableDiffusion, "StableDiffusionPipeline",   true,  false, 16,    false, G::kClassifierFree,     7.0, false, "sd_v1",           "networks.lora",       "unet",        N::kDiffusers},
        {Arch::kSd2,   "sd2",   "Stable Diffusion 2.x", F::kStableDiffusion, "StableDiffusionPipeline",   false, false, 16,    false, G::kClassifierFree,     7.0, false, "sd_v2",           "networks.lora",       "unet",        N::kDiffusers},
        {Arch::kSdxl,  "sdxl",  "Stable Diffusion XL",  F::kStableDiffusion, "StableDiffusionXLPipeline", true,  false, 16,    true,  G::kClassifierFree,     7.0, false, "sdxl_base_v1-0",  "networks.lora",       "unet",        N::kDiffusers},
        {Arch::kFlux,  "flux",  "Flux.1",               F::kFlux,            "FluxPipeline",              true,  false, 32,    true,  G::kDistilledEmbedding, 3.5, true,  "flux1",           "networks.lora_flux",  "transformer", N::kDiffusers},
        {Arch::kWan21, "wan21", "Wan 2.1",              F::kWan,             "WanPipeline",               true,  true,  16,    false, G::kClassifierFree,     5.0, true,  "wan_2.1",         "networks.lora_wan",   "diffusion_model", N::kWanOriginal},
        {Arch::kWan22_14b, "wan22_14b", "Wan 2.2 14B",      F::kWan22,           "WanPipeline",               true,  true,  16,    false, G::kClassifierFree,     5.0, true,  "wan_2.2_14b",     "networks.lora_wan",   "diffusion_model", N::kWanOriginal},
        // Kontext: Flux.1's transformer with the control image's latents after the target's on the sequence
        {Arch::kFluxKontext, "flux_kontext", "Flux.1 Kontext", F::kFlux,      "FluxKontextPipeline",       true,  false, 16,    true,  G::kDistilledEmbedding, 3.5, true,  "flux1",           "networks.lora_flux",  "transformer", N::kDiffusers, /*control_images=*/true},
        // Chroma: Flux.1's blocks fed by one modulation approximator, T5 only, real CFG
        {Arch::kChroma, "chroma",    "Chroma",               F::kChroma,          "ChromaPipeline",            true,  false, 32,    false, G::kClassifierFree,     5.0, true,  "chroma",          "networks.lora_flux",  "diffusion_model", N::kFluxOriginal},
        // Flex.2: Flux.1's transformer over the latents with Flex.2's inpaint and control channels
        {Arch::kFlex2, "flex2",      "Flex.2",               F::kFlux,            "FluxPipeline",              true,  false, 16,    true,  G::kDistilledEmbedding, 3.5, true,  "flux1",           "networks.lora_flux",  "transformer", N::kDiffusers, /*control_images=*/true},
        // Z-Image: a single-stream DiT over 2x2 patches, Qwen3 as text encoder, Flux's VAE;
        // sampled at ai-toolkit's guidance 1 (Turbo's: one pass), which it lowers by one
        {Arch::kZImage, "zimage",    "Z-Image",              F::kZImage,          "ZImagePipeline",            true,  false, 16,    false, G::kClassifierFree,     1.0, true,  "zimage",          "networks.lora",       "diffusion_model", N::kDiffusers},
        // Qwen-Image: 60 dual-stream blocks (Flux's under Qwen's names), Qwen2.5-VL as text
        // encoder, the Wan-derived VAE; true CFG at ai-toolkit's guidance (its true_cfg_scale)
        {Arch::kQwenImage, "qwen_image", "Qwen-Image",       F::kQwenImage,       "QwenImagePipeline",         true,  false, 32,    false, G::kClassifierFree,     4.0, true,  "qwen_image",      "networks.lora",       "diffusion_model", N::kDiffusers},
        // Qwen-Image-Edit: the control image's latents after the target's on the sequence, and
        // the image itself in the prompt, read by Qwen2.5-VL's vision tower; Edit-2509 (the
        // "plus" pipeline) takes up to three, each at its own size
        {Arch::kQwenImageEdit, "qwen_image_edit", "Qwen-Image-Edit", F::kQwenImage, "QwenImageEditPipeline", true, false, 32, false, G::kClassifierFree, 4.0, true, "qwen_image", "networks.lora", "diffusion_model", N::kDiffusers, /*control_images=*/true, /*controls_in_prompt=*/true, /*max_control_images=*/1},
        {Arch::kQwenImageEditPlus, "qwen_image_edit_plus", "Qwen-Image-Edit-2509", F::kQwenImage, "QwenImageEditPlusPipeline", true, false, 32, false, G::kClassifierFree, 4.0, true, "qwen_image", "networks.lora", "diffusion_model", N::kDiffusers, /*control_images=*/true, /*controls_in_prompt=*/true, /*max_control_images=*/3},
    };
    // clang-format on
    return kTable;
}

const char* to_string(FamilyKind family) {
    switch (family) {
        case FamilyKind::kStableDiffusion: return "Stable Diffusion";
        case FamilyKind::kFlux: return "Flux";
        case FamilyKind::kWan: return "Wan";
        case FamilyKind::kWan22: return "Wan 2.2";
        case FamilyKind::kChroma: return "Chroma";
        case FamilyKind::kZImage: return "Z-Image";
        case FamilyKind::kQwenImage: return "Qwen-Image";
    }
    return "?";
}

int expert_count(FamilyKind family) {
    return family == FamilyKind::kWan22 ? 2 : 1;
}

const ArchInfo& arch_info(Arch arch) {
    return arch_table().at(static_cast<std::size_t>(arch));
}

const char* to_string(Arch arch) {
    return arch_info(arch).name;
}

std::optional<Arch> find_arch(std::string_view name) {
    for (const ArchInfo& a : arch_table()) {
        if (name == a.name) return a.arch;
    }
    return std::nullopt;
}

bool is_ai_toolkit_arch(std::string_view name) {
    return find_arch(name).has_value() ||
           std::any_of(std::begin(kOtherAiToolkitArchs), std::end(kOtherAiToolkitArchs),
                       [&](const char* other) { return name == other; });
}

std::vector<Arch> archs_of_pipeline(std::string_view pipeline_class) {
    std::vector<Arch> out;
    for (const ArchInfo& a : arch_table()) {
        if (pipeline_class == a.pipeline_class) out.push_back(a.arch);
    }
    return out;
}

std::string trainable_arch_list() {
    std::string out;
    for (const ArchInfo& a : arch_table()) {
        if (!a.trainable) continue;
        if (!out.empty()) out += ", ";
        out += a.name;
    }
    return out;
}

std::string pipeline_class_list() {
    std::vector<std::string> seen;
    for (const ArchInfo& a : arch_table()) {
        if (std::find(seen.begin(), seen.end(), a.pipeline_class) == seen.end())
            seen.emplace_back(a.pipeline_class);
    }
    std::string out;
    for (const std::string& s : seen) out += (out.empty() ? "" : ", ") + s;
    return out;
}

}  // namespace loom::config
