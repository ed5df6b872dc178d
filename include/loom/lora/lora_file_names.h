#pragma once

// What a LoRA file calls a module and which file holds it. One denoiser has one file whose keys
// are "<prefix>.<module path>"; a denoiser of experts (Wan 2.2 14B) has one file per trained
// expert, "<name><suffix>.safetensors" ("_high_noise", "_low_noise"), whose keys drop the
// expert's own prefix ("transformer_1.") as ai-toolkit's save_lora writes them. Module paths are
// diffusers' or, for the archs whose row says so, the original Wan checkpoint's:
//   blocks.N.attn1.to_q / to_k / to_v / to_out.0 -> blocks.N.self_attn.q / k / v / o
//   blocks.N.attn2.*                            -> blocks.N.cross_attn.*
//   blocks.N.ffn.net.0.proj / ffn.net.2         -> blocks.N.ffn.0 / ffn.2
// which diffusers' Wan loader reads back (_convert_non_diffusers_wan_lora_to_diffusers).
//
// ref: ai-toolkit toolkit/models/wan21/wan_lora_convert.py::convert_to_original,
//      extensions_built_in/diffusion_models/wan22/wan22_14b_model.py::Wan2214bModel.save_lora

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

// The key stem a file gives `module_path` (a path in the denoiser): "<prefix>.<name>".
std::string lora_key_stem(const LoRAModel& model, const std::string& module_path);
// The module path a file's key stem names, read from the file of `expert` (nullptr: one
// denoiser); nullopt when the stem does not start with the model's prefix.
std::optional<std::string> module_path_of(const LoRAModel& model, const std::string& stem,
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
