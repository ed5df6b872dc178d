#pragma once

// LoRA files (formats.md §6): the kohya layout that ai-toolkit writes for SD 1.x / SDXL UNets
//   lora_unet_<module path with '_'>.lora_down.weight / .lora_up.weight / .alpha
// and the PEFT layout ai-toolkit writes for transformers
//   transformer.<module path>.lora_A.weight / .lora_B.weight  (Flux, Kontext, Flex.2)
//   diffusion_model.<name>.lora_A.weight / .lora_B.weight     (Wan, Chroma, Z-Image, Qwen-Image;
//                                                              lora/lora_file_names.h)
// A UNet's file in the "peft" layout is written in diffusers' attention-processor names
//   unet.<…attnN>.processor.to_q_lora.down.weight / .up.weight, unet.<path>.lora.down.weight
// because ComfyUI maps a UNet's diffusers-named attention keys only in that form; diffusers
// converts it on load, and loom reads it and the lora_A/lora_B one. alpha/rank is folded into
// the up weight, so loaders that assume scale 1 — diffusers without adapter metadata, ComfyUI
// without an alpha key — apply the same change. Every layout loads into ComfyUI and diffusers.

#include <ATen/core/ScalarType.h>

#include <filesystem>
#include <string>
#include <vector>

#include "loom/io/safetensors.h"
#include "loom/lora/lora_network.h"

namespace loom {

enum class LoRAFileLayout { kKohya, kPeft };

// "kohya" / "peft" (the job's save.format).
LoRAFileLayout parse_lora_layout(const std::string& text);

// Writes the network's weights at `dtype` (the job's save.dtype) with `metadata` (ss_* keys,
// training_info, the job's meta block), plus "format": "pt". Atomic. Throws loom::Error for the
// kohya layout of a Flux network. A denoiser of experts gets one file per expert with a LoRA
// beside `path` (lora/lora_file_names.h); returns the files written.
std::vector<std::filesystem::path> save_lora(const LoRANetwork& network,
                                             const std::filesystem::path& path,
                                             LoRAFileLayout layout, at::ScalarType dtype,
                                             SafetensorsMetadata metadata);

struct LoRALoadReport {
    LoRAFileLayout layout = LoRAFileLayout::kKohya;
    std::size_t loaded = 0;  // modules whose weights were set
};

// Loads a LoRA file (either layout, detected from its keys) into `network`'s adapters; for a
// denoiser of experts `path` names any file of the set, and each expert's is read. A module
// of the file that the network has no LoRA for, a LoRA of the network missing from the file, or
// a rank/shape mismatch is a FormatError naming the file and the first such modules.
LoRALoadReport load_lora(LoRANetwork& network, const std::filesystem::path& path);

// Builds a network shaped like the file (its modules, ranks and alphas) on `model` and loads it:
// what `loom sample --lora` does with any kohya or PEFT LoRA for this model.
LoRANetwork load_lora_network(torch::nn::Module& model, const std::filesystem::path& path,
                              const LoRAModel& target_model = lora_model_of(config::Arch::kSd1));

}  // namespace loom
