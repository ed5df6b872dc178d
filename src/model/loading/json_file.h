#pragma once

// Reading the JSON files of a model folder (model_index.json, config.json, tokenizer.json, ...)
// with errors that name the file: one reader for the configs, the tokenizers and the indexes.

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace loom {

// The whole file as bytes. IoError naming it when it does not exist (`missing_hint`, when given,
// says what should be there), is not a regular file, or cannot be read.
std::string read_file_bytes(const std::filesystem::path& path,
                            const std::string& missing_hint = "");

// The file parsed as JSON: read_file_bytes's errors, and a FormatError naming the file when it is
// not valid JSON.
nlohmann::json parse_json_file(const std::filesystem::path& path,
                               const std::string& missing_hint = "");

// parse_json_file, and the top level must be an object (a config.json, model_index.json, a
// shard index).
nlohmann::json read_json(const std::filesystem::path& path);

}  // namespace loom
