#pragma once

// Reading a model in diffusers folder layout (formats.md §2, DESIGN.md "Interoperability"):
// model_index.json, per-component config.json, and weights in *.safetensors — single files,
// fp16/bf16 variants, or shards listed by *.safetensors.index.json.

#include <torch/nn/module.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/model/autoencoder_kl.h"
#include "loom/model/clip_text_model.h"
#include "loom/model/noise_schedule.h"
#include "loom/model/unet_2d_condition.h"

namespace loom {

// Declared here, defined with their models (flow_match.h, flux_transformer.h, t5_encoder.h), so
// that this header does not pull them into every file that reads a folder.
class SafetensorsFile;
struct FlowMatchConfig;
struct FluxConfig;
struct T5Config;
struct WanConfig;
struct WanVAEConfig;
class T5EncoderModelImpl;

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
    // Every one of `components` listed in model_index.json and present as a folder, before
    // anything is loaded: FormatError naming model_index.json and the component when it is not
    // listed, IoError naming the folder when it is missing.
    void require(const std::vector<std::string>& components) const;
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
// A FlowMatchEulerDiscreteScheduler scheduler_config.json: the options it does not implement
// (karras/exponential/beta sigmas, shift_terminal, stochastic sampling, inverted sigmas, a linear
// time shift) must keep their defaults.
FlowMatchConfig read_flow_match_config(const std::filesystem::path& config_json);
// A FluxTransformer2DModel config.json (patch_size 1 only: Flux.1 dev and schnell).
FluxConfig read_flux_config(const std::filesystem::path& config_json);
// A WanTransformer3DModel config.json (Wan 2.1 text-to-video; the image-to-video keys are
// refused as not supported yet).
WanConfig read_wan_config(const std::filesystem::path& config_json);
// An AutoencoderKLWan config.json (Wan 2.1's VAE; Wan 2.2's residual, patchified VAE is refused
// as not supported yet). Without latents_mean / latents_std, Wan 2.1's values (z_dim 16).
WanVAEConfig read_wan_vae_config(const std::filesystem::path& config_json);
// A T5EncoderModel or UMT5EncoderModel config.json (model_type "t5" or "umt5").
T5Config read_t5_config(const std::filesystem::path& config_json);

// The weight files of a component folder: the index's shards, else the single weight file
// (preferring full precision over an fp16/bf16 variant).
std::vector<std::filesystem::path> find_weight_files(const std::filesystem::path& component_dir);

// Loads every parameter and buffer of `module` from `files`, casting to each parameter's dtype.
// Missing or unexpected keys and shape mismatches raise one FormatError listing the first
// offenders and a hint. `base_prefix` is transformers' base_model_prefix: a file key without it
// also matches the module key with it (transformers 5 saves CLIPTextModel as "embeddings...",
// transformers 4 and the SD checkpoints as "text_model.embeddings..."). `tied` maps file keys
// that are copies of a tied module key onto it (T5's "encoder.embed_tokens.weight" is
// "shared.weight"). Returns the number of tensors loaded.
std::size_t load_weights(torch::nn::Module& module, const std::vector<std::filesystem::path>& files,
                         const std::string& what, const std::string& base_prefix = "",
                         const std::map<std::string, std::string>& tied = {});

// One tensor to load into a module: its name there, its shape, and how to read it (from a file,
// possibly renamed, split or reshaped: single-file checkpoints, model/single_file.h).
struct StoredTensor {
    std::string name;
    std::vector<int64_t> shape;
    std::function<at::Tensor()> read;
};

// Every tensor of `file`, under its own name (the sources keep the file open).
std::vector<StoredTensor> stored_tensors_of(const std::shared_ptr<const SafetensorsFile>& file);

// load_weights over sources; `where` names the file or folder in the FormatError and `config`
// where the module's config came from ("config.json").
std::size_t load_stored_tensors(torch::nn::Module& module, const std::vector<StoredTensor>& sources,
                                const std::string& what, const std::string& where,
                                const std::string& config, const std::string& base_prefix = "",
                                const std::map<std::string, std::string>& tied = {});

// T5EncoderModel / UMT5EncoderModel weights: "encoder.embed_tokens.weight" is tied to
// "shared.weight", and either (or both) may be in the files.
std::size_t load_t5_weights(T5EncoderModelImpl& model,
                            const std::vector<std::filesystem::path>& files,
                            const std::string& what);

// Saves a module's parameters and buffers as one safetensors file (diffusers key names).
void save_weights(const torch::nn::Module& module, const std::filesystem::path& file);

}  // namespace loom
