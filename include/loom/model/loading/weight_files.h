#pragma once

// A component's weights in diffusers folder layout (formats.md §2): *.safetensors single files,
// fp16/bf16 variants, or shards listed by *.safetensors.index.json, loaded into a module by key
// with one clear error for every mismatch.

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace loom {

class SafetensorsFile;

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

// `module` (a ModuleHolder just built from the folder's config.json) at `dtype`, with the
// weights of `component_dir` loaded as load_weights does (`what` names it in errors), in eval
// mode: what every component loader does once its config is read.
template <class Holder>
Holder load_component(Holder module, const std::filesystem::path& component_dir,
                      at::ScalarType dtype, const std::string& what) {
    module->to(dtype);
    load_weights(*module, find_weight_files(component_dir), what);
    module->eval();
    return module;
}

// One tensor to load into a module: its name there, its shape, and how to read it (from a file,
// possibly renamed, split or reshaped: single-file checkpoints, model/sd/single_file.h).
struct StoredTensor {
    std::string name;
    std::vector<int64_t> shape;
    std::function<at::Tensor()> read;
};

// Every tensor of `file`, under its own name (the sources keep the file open).
std::vector<StoredTensor> stored_tensors_of(const std::shared_ptr<const SafetensorsFile>& file);
// Every tensor of a component folder's weight files (find_weight_files), under its own name: for
// a loader that takes one model's keys out of files holding several (a language model and its
// vision tower).
std::vector<StoredTensor> stored_tensors_in(const std::filesystem::path& component_dir);

// load_weights over sources; `where` names the file or folder in the FormatError and `config`
// where the module's config came from ("config.json").
std::size_t load_stored_tensors(torch::nn::Module& module, const std::vector<StoredTensor>& sources,
                                const std::string& what, const std::string& where,
                                const std::string& config, const std::string& base_prefix = "",
                                const std::map<std::string, std::string>& tied = {});

// Saves a module's parameters and buffers as one safetensors file (diffusers key names).
void save_weights(const torch::nn::Module& module, const std::filesystem::path& file);

}  // namespace loom
