#pragma once

// What a LoRA file calls a module and which file holds it. One denoiser has one file whose keys
// are "<prefix>.<module path>"; a denoiser of experts (Wan 2.2 14B) has one file per trained
// expert, "<name><suffix>.safetensors" ("_high_noise", "_low_noise"), whose keys drop the
// expert's own prefix ("transformer_1.") as ai-toolkit's save_lora writes them. Module paths are
// diffusers' or, for the archs whose row says so, the original Wan checkpoint's:
//   blocks.N.attn1.to_q / to_k / to_v / to_out.0 -> blocks.N.self_attn.q / k / v / o
//   blocks.N.attn2.*                            -> blocks.N.cross_attn.*
//   blocks.N.ffn.net.0.proj / ffn.net.2         -> blocks.N.ffn.0 / ffn.2
// which diffusers' Wan loader reads back (_convert_non_diffusers_wan_lora_to_diffusers); or Black
// Forest Labs' Flux checkpoint's (Chroma, as ai-toolkit trains it on that checkpoint's modules):
//   transformer_blocks.N.attn.to_q / to_k / to_v    -> double_blocks.N.img_attn.qkv (fused)
//   transformer_blocks.N.attn.add_{q,k,v}_proj      -> double_blocks.N.txt_attn.qkv (fused)
//   attn.to_out.0 / attn.to_add_out                 -> img_attn.proj / txt_attn.proj
//   ff.net.0.proj / ff.net.2 (ff_context: txt_)     -> img_mlp.0 / img_mlp.2
//   single_transformer_blocks.N.attn.to_{q,k,v} and proj_mlp -> single_blocks.N.linear1 (fused)
//   single_transformer_blocks.N.proj_out            -> single_blocks.N.linear2
// A fused key holds several of loom's modules as one LoRA on the fused Linear: lora_A the parts'
// downs stacked, lora_B their ups block-diagonal (an exact rank r1 + r2 + ... LoRA of the fused
// Linear), which loads back part by part; a fused key of rank r whose lora_B is not
// block-diagonal (ai-toolkit trains the fused Linear) loads as rank r on each part, its lora_A
// shared and lora_B's rows split — the same weight change either way.
//
// ref: ai-toolkit toolkit/models/wan21/wan_lora_convert.py::convert_to_original,
//      extensions_built_in/diffusion_models/wan22/wan22_14b_model.py::Wan2214bModel.save_lora,
//      extensions_built_in/diffusion_models/chroma/chroma_model.py (convert_lora_weights_*),
//      diffusers loaders/lora_conversion_utils.py::_convert_kohya_flux_lora_to_diffusers

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "loom/lora/target_rules.h"

namespace loom {

// The original Wan name of a diffusers module path inside a Wan transformer, and back. loom::Error
// for a path that has no such name (only the blocks' attention and feed-forward Linears do).
std::string wan_original_name(const std::string& diffusers_path);
std::string wan_diffusers_name(const std::string& original_path);

// A module's place in a file: its key stem "<prefix>.<name>" and, where the name is a fused
// Linear's, which of its `parts` (in output-row order) the module is.
struct LoRAFileSlot {
    std::string stem;
    int part = 0;
    int parts = 1;
};

// The BFL name of a diffusers Flux block path with its part, and back (every part's path, in
// order); nullopt / empty for a path or name outside the blocks' Linears.
std::optional<LoRAFileSlot> flux_original_name(const std::string& diffusers_path);
std::vector<std::string> flux_diffusers_names(const std::string& original_path);

// A UNet module's key stem in diffusers' attention-processor layout, without the "unet." prefix:
// the stem diffusers wrote before PEFT and the only diffusers-named one ComfyUI maps for a UNet's
// attention (comfy/lora.py model_lora_keys_unet: ".to_" -> ".processor.to_", "to_out.0" ->
// "to_out"), which diffusers' loader still converts (convert_unet_state_dict_to_peft):
//   ….attnN.to_q / to_k / to_v / to_out.0 -> ….attnN.processor.to_q_lora / … / to_out_lora
//   any other module path                 -> <path>.lora
// with ".down.weight" / ".up.weight" after it.
std::string unet_processor_stem(const std::string& module_path);
// The module path of such a stem; nullopt when `stem` is not one.
std::optional<std::string> unet_module_of_processor_stem(const std::string& stem);

// The slot a file gives `module_path` (a path in the denoiser). loom::Error for a module the
// file's names have no name for.
LoRAFileSlot lora_file_slot(const LoRAModel& model, const std::string& module_path);
// Its key stem: "<prefix>.<name>".
std::string lora_key_stem(const LoRAModel& model, const std::string& module_path);
// The module paths a file's key stem names (several, in part order, for a fused Linear), read
// from the file of `expert` (nullptr: one denoiser); empty when the stem does not start with the
// model's prefix or names no module.
std::vector<std::string> module_paths_of(const LoRAModel& model, const std::string& stem,
                                         const DenoiserExpert* expert);

// Expert `expert`'s file beside the run's LoRA path: dir/name.safetensors ->
// dir/name_high_noise.safetensors.
std::filesystem::path expert_file(const std::filesystem::path& path, const DenoiserExpert& expert);
// Which expert's file `path` is, by its suffix; nullptr when it has none of the model's.
const DenoiserExpert* expert_of_file(const LoRAModel& model, const std::filesystem::path& path);
// The files a LoRA given as `path` consists of, with their experts: `path` itself for one
// denoiser; for experts, each expert's file beside it that exists (`path` may name any of them),
// so that one path loads both of a Wan 2.2 pair as ai-toolkit's load_lora does.
std::vector<std::pair<std::filesystem::path, const DenoiserExpert*>> lora_files_of(
    const LoRAModel& model, const std::filesystem::path& path);

}  // namespace loom
