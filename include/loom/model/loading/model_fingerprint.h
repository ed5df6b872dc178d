#pragma once

// A model's fingerprint for the stable-config store's key (DESIGN.md "Stability and reuse"):
// what decides how much memory a model needs — its configs and the names, dtypes and shapes of
// its weights — and nothing that does not (the weight values). Two checkpoints fine-tuned from
// one base share a fingerprint; the same architecture at another width does not.
//
// No weights are read: safetensors headers only, so fingerprinting a multi-GB model takes
// milliseconds.

#include <filesystem>
#include <string>

namespace loom {

// 64 hex digits (SHA-256) over, for a diffusers folder, every *.json file (the model index, the
// component configs, the shard indexes, the tokenizer's) and every *.safetensors header (tensor
// names, dtypes and shapes, sorted by name), each prefixed with its path relative to `model`,
// in path order; for a single .safetensors file, its header. Throws IoError / FormatError
// naming the file when `model` is missing or a weight file is damaged.
std::string model_fingerprint(const std::filesystem::path& model);

}  // namespace loom
