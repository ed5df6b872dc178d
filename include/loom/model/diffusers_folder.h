#pragma once

// Reading a model in diffusers folder layout (formats.md §2, DESIGN.md "Interoperability"):
// model_index.json, per-component config.json, and weights in *.safetensors — single files,
// fp16/bf16 variants, or shards listed by *.safetensors.index.json.

#include <torch/nn/module.h>

#include <filesystem>
#include <string>
#include <vector>

#include "loom/model/autoencoder_kl.h"
#include "loom/model/clip_text_model.h"
#include "loom/model/noise_schedule.h"
#include "loom/model/unet_2d_condition.h"

namespace loom {

struct DiffusersComponent {
    std::string name;        // "unet", "text_encoder_2", ...
    std::string library;     // "diffusers", "transformers"
    std::string class_name;  // "UNet2DConditionModel", ...
};

struct DiffusersFolder {
    std::filesystem::path root;
    std::string pipeline_class;  // "StableDiffusionPipeline", "StableDiffusionXLPipeline"
    std::vector<DiffusersComponent> components;

    bool has(const std::string& component) const;
    std::filesystem::path dir(const std::string& component) const { return root / component; }
};

// Reads and checks model_index.json. Throws IoError / FormatError naming the file.
DiffusersFolder read_diffusers_folder(const std::filesystem::path& root);

// Component configs from their config.json (unsupported options are FormatErrors naming the
// key, never silently dropped).
UNetConfig read_unet_config(const std::filesystem::path& config_json);
VAEConfig read_vae_config(const std::filesystem::path& config_json);
CLIPTextConfig read_clip_text_config(const std::filesystem::path& config_json,
                                     bool with_projection);
NoiseScheduleConfig read_scheduler_config(const std::filesystem::path& config_json);

// The weight files of a component folder: the index's shards, else the single weight file
// (preferring full precision over an fp16/bf16 variant).
std::vector<std::filesystem::path> find_weight_files(const std::filesystem::path& component_dir);

// Loads every parameter and buffer of `module` from `files`, casting to each parameter's dtype.
// Missing or unexpected keys and shape mismatches raise one FormatError listing the first
// offenders and a hint. `base_prefix` is transformers' base_model_prefix: a file key without it
// also matches the module key with it (transformers 5 saves CLIPTextModel as "embeddings...",
// transformers 4 and the SD checkpoints as "text_model.embeddings..."). Returns the number of
// tensors loaded.
std::size_t load_weights(torch::nn::Module& module, const std::vector<std::filesystem::path>& files,
                         const std::string& what, const std::string& base_prefix = "");

// Saves a module's parameters and buffers as one safetensors file (diffusers key names).
void save_weights(const torch::nn::Module& module, const std::filesystem::path& file);

}  // namespace loom
