#pragma once

// The model architectures: every `model.arch` string of the ai-toolkit schema (and its legacy
// is_* flags), and, for the ones loom builds, one table row each with everything the layers
// above need to know about an arch. A job's arch string is turned into an `Arch` once, when the
// job is resolved (config::Choices::arch), and a model folder's pipeline class once, when it is
// read; past those two boundaries code switches over the enum or reads the row, so a new arch
// is one row here and its family's folder (docs/ARCHITECTURE.md "Adding a model family").
//
// Plain C++, no torch: llama.cpp's llm_arch table and its predicates, as data.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom::config {

// The archs loom builds (loads, and trains where the row says so).
enum class Arch {
    kSd1,
    kSd2,
    kSdxl,
    kFlux,
    kWan21,
    kWan22_14b,
    kFluxKontext,
    kChroma,
    kFlex2,
    kZImage,
    kQwenImage,
    kQwenImageEdit,
    kQwenImageEditPlus
};

// The family implementation an arch is trained through (model/family.h).
enum class FamilyKind { kStableDiffusion, kFlux, kWan, kWan22, kChroma, kZImage, kQwenImage };

// How a LoRA file names the denoiser's modules: diffusers' own paths ("blocks.0.attn1.to_q"), or
// the original Wan checkpoint's ("blocks.0.self_attn.q"), as ai-toolkit writes Wan 2.2 LoRAs
// (toolkit/models/wan21/wan_lora_convert.py::convert_to_original) and diffusers' Wan loader reads;
// or Black Forest Labs' Flux checkpoint's ("double_blocks.0.img_attn.qkv", q, k and v fused into
// one key), as ai-toolkit writes Chroma LoRAs and ComfyUI reads them (lora/lora_file_names.h).
enum class LoRAModuleNames { kDiffusers, kWanOriginal, kFluxOriginal };

// How previews are guided: a classifier-free pass beside the conditional one (a guidance scale
// above 1 doubles the sampling batch), or a distilled guidance embedding (Flux.1: one pass).
enum class GuidanceKind { kClassifierFree, kDistilledEmbedding };

struct ArchInfo {
    Arch arch;
    const char* name;          // the job's model.arch: "sd1", "flux"
    const char* display_name;  // for messages: "Stable Diffusion 1.x", "Flux.1"
    FamilyKind family;
    const char* pipeline_class;  // model_index.json's _class_name for a diffusers folder
    bool trainable;              // loom trains a LoRA for it
    // A video model: datasets may hold clips, whose frame counts are 1 + 4k (Wan's VAE
    // compresses 4 frames into one after the first), and frames are the ladder's first rungs.
    bool video;
    int64_t bucket_divisibility;  // image sides are multiples of this (ai-toolkit: 16 for SD)
    bool two_text_encoders;       // SDXL: CLIP L and OpenCLIP bigG
    GuidanceKind guidance;
    // `loom sample`'s guidance scale when --guidance is not given (the pipelines' defaults:
    // classifier-free 7 for SD, 5 for Wan; Flux dev's distilled 3.5).
    double sample_guidance;
    // Trained with flow matching (rectified flow, the Euler sampler) rather than DDPM.
    bool flow_matching;
    // The LoRA file's kohya-style metadata (ss_base_model_version, ss_network_module).
    const char* kohya_base_model;
    const char* kohya_network_module;
    // The component name of its PEFT-layout LoRA keys ("unet.<path>.lora_A",
    // "transformer.<path>.lora_A", Wan 2.2's "diffusion_model.<path>.lora_A").
    const char* lora_prefix;
    LoRAModuleNames lora_module_names;
    // Datasets pair each image with a control image (datasets[].control_path) and previews take
    // one (a prompt's --ctrl_img): Flux.1 Kontext edits the control into the target, Flex.2
    // takes it as its control channels.
    bool control_images = false;
    // The control images are also read by the text encoder (Qwen-Image-Edit's Qwen2.5-VL sees
    // them in the prompt): a caption's conditioning depends on its item's controls.
    bool controls_in_prompt = false;
    // How many control images a training image pairs with (datasets[].control_path's folders)
    // and a preview takes (ctrl_img, ctrl_img_1 .. ctrl_img_3).
    int max_control_images = 1;
};

// "Stable Diffusion", "Flux", "Wan", "Wan 2.2": for messages that speak of the family.
const char* to_string(FamilyKind family);

// How many denoisers of their own timesteps the family has: 2 for Wan 2.2 14B (its high- and
// low-noise experts), 1 for every other.
int expert_count(FamilyKind family);

// One row per Arch, in the enum's order.
const std::vector<ArchInfo>& arch_table();
const ArchInfo& arch_info(Arch arch);
// The row's name: "sd1", "flux".
const char* to_string(Arch arch);

// The Arch whose name is `name`; nullopt for every other string (including the ai-toolkit archs
// loom does not build).
std::optional<Arch> find_arch(std::string_view name);
// Whether `name` is one of ai-toolkit's arch strings, built by loom or not.
bool is_ai_toolkit_arch(std::string_view name);
// The family's archs whose diffusers pipeline class is `pipeline_class`, in table order (SD 1.x
// and 2.x share StableDiffusionPipeline: the caller tells them apart by the text encoder).
std::vector<Arch> archs_of_pipeline(std::string_view pipeline_class);

// The trainable archs' names, comma-separated, for messages.
std::string trainable_arch_list();
// The pipeline classes loom loads, comma-separated, for messages.
std::string pipeline_class_list();

}  // namespace loom::config
