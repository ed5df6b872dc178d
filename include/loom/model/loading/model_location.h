#pragma once

// Where the model a job names lies on this machine. `model.name_or_path` is a folder (or file) as
// given, or a Hugging Face hub id ("black-forest-labs/FLUX.1-dev", as ai-toolkit jobs write it)
// found in the local hub cache — never over the network: loom downloads nothing.
//
// The caches searched, in huggingface_hub's order: $HF_HUB_CACHE (or the older
// $HUGGINGFACE_HUB_CACHE); $HF_HOME/hub; $XDG_CACHE_HOME/huggingface/hub; ~/.cache/huggingface/hub.
// In a cache, models--<org>--<name>/refs/main names the revision whose folder is
// snapshots/<revision>.

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace loom {

using EnvironmentLookup = std::function<std::optional<std::string>(const std::string&)>;

// The environment of this process (std::getenv).
std::optional<std::string> process_environment(const std::string& name);

// Whether `text` has the shape of a hub id: "<org>/<name>", each of letters, digits, '-', '_'
// and '.', not starting with '.'.
bool is_hub_id(const std::string& text);

// The hub caches to search, in order, from `env` (duplicates removed).
std::vector<std::filesystem::path> hub_cache_folders(const EnvironmentLookup& env);

// `name_or_path` when it exists; else, for a hub id, its snapshot folder in the first cache that
// has it. IoError otherwise: for a hub id naming the folders searched and the command that
// downloads it; for anything else, that there is no such folder or file.
std::filesystem::path locate_model(const std::string& name_or_path,
                                   const EnvironmentLookup& env = process_environment);

}  // namespace loom
