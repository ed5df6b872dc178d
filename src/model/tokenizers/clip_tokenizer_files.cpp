#include "clip_tokenizer_files.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "loading/json_file.h"
#include "loom/core/error.h"

namespace loom::clip_tokenizer_detail {

namespace {

const char kTokenizerFiles[] = "a diffusers tokenizer folder has vocab.json and merges.txt";

}  // namespace

std::string read_file(const std::filesystem::path& path) {
    return read_file_bytes(path, kTokenizerFiles);
}

Json parse_json_file(const std::filesystem::path& path) {
    return loom::parse_json_file(path, kTokenizerFiles);
}

namespace {

// A boolean field of a token object; `fallback` when it is absent.
bool token_flag(const Json& token, const char* name, bool fallback,
                const std::filesystem::path& path, const std::string& key) {
    if (!token.contains(name)) return fallback;
    const Json& value = token[name];
    if (!value.is_boolean()) {
        throw FormatError(path.string(),
                          key + "." + name + " must be true or false, not " + value.dump());
    }
    return value.get<bool>();
}

// Reads a token written as "text" or {"content": "text", "normalized": ..., ...}. `special` is
// whether transformers treats it as a special token, which makes "normalized" default to false.
TokenSpec parse_token(const Json& value, bool special, const std::filesystem::path& path,
                      const std::string& key) {
    if (value.is_string()) return {value.get<std::string>(), false};
    if (!value.is_object() || !value.contains("content") || !value["content"].is_string()) {
        throw FormatError(path.string(),
                          key + " must be a string or an object with a string \"content\"");
    }
    for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
        if (token_flag(value, flag, false, path, key)) {
            throw FormatError(path.string(), key + " sets \"" + flag +
                                                 "\": true, which loom's tokenizers do not "
                                                 "support");
        }
    }
    special = token_flag(value, "special", special, path, key) || special;
    return {value["content"].get<std::string>(),
            token_flag(value, "normalized", !special, path, key)};
}

}  // namespace

std::map<long long, TokenSpec> parse_added_tokens(const Json& root,
                                                  const std::filesystem::path& path) {
    std::map<long long, TokenSpec> by_id;
    if (!root.contains("added_tokens") || root["added_tokens"].is_null()) return by_id;
    const Json& added = root["added_tokens"];
    if (!added.is_array()) {
        throw FormatError(path.string(),
                          "added_tokens must be an array of token objects, not " + added.dump());
    }
    for (std::size_t i = 0; i < added.size(); ++i) {
        const std::string key = "added_tokens[" + std::to_string(i) + "]";
        const Json& entry = added[i];
        if (!entry.is_object()) {
            throw FormatError(path.string(),
                              key + " must be an object with \"id\" and \"content\"");
        }
        if (!entry.contains("id") || !entry["id"].is_number_integer() ||
            entry["id"].get<long long>() < 0 ||
            entry["id"].get<long long>() > std::numeric_limits<std::uint32_t>::max()) {
            throw FormatError(path.string(),
                              key + ".id must be an integer in [0, 2^32), not " +
                                  (entry.contains("id") ? entry["id"].dump() : "missing"));
        }
        by_id[entry["id"].get<long long>()] = parse_token(entry, false, path, key);
    }
    return by_id;
}

std::map<long long, TokenSpec> parse_added_tokens_decoder(
    const Json& config, const std::filesystem::path& path,
    const std::vector<std::string>& specials) {
    const Json& decoder = config["added_tokens_decoder"];
    if (!decoder.is_object()) {
        throw FormatError(path.string(), "added_tokens_decoder must be an object");
    }
    std::map<long long, TokenSpec> by_id;
    for (const auto& [id, value] : decoder.items()) {
        long long index = 0;
        try {
            index = std::stoll(id);
        } catch (const std::exception&) {
            throw FormatError(path.string(),
                              "added_tokens_decoder key \"" + id + "\" is not a token id");
        }
        bool special = false;
        if (value.is_object() && value.contains("content")) {
            for (const std::string& s : specials) special = special || value["content"] == s;
        }
        by_id[index] = parse_token(value, special, path, "added_tokens_decoder." + id);
    }
    return by_id;
}

SpecialTokens read_special_tokens(const std::filesystem::path& dir,
                                  const std::function<std::vector<TokenSpec>()>& json_added) {
    SpecialTokens tokens;
    const std::filesystem::path config_path = dir / "tokenizer_config.json";
    const std::filesystem::path map_path = dir / "special_tokens_map.json";
    std::error_code ec;
    Json config = Json::object();
    if (std::filesystem::exists(config_path, ec)) {
        config = parse_json_file(config_path);
        if (!config.is_object()) throw FormatError(config_path.string(), "must be a JSON object");
    }
    const std::pair<const char*, TokenSpec*> named[] = {{"bos_token", &tokens.bos},
                                                        {"eos_token", &tokens.eos},
                                                        {"unk_token", &tokens.unk},
                                                        {"pad_token", &tokens.pad}};
    for (const auto& [key, spec] : named) {
        if (config.contains(key) && !config[key].is_null()) {
            *spec = parse_token(config[key], true, config_path, key);
        }
    }
    if (config.contains("added_tokens_decoder")) {
        // transformers 4.34+ format: the decoder's flags win and special_tokens_map.json is not
        // read at all.
        std::vector<std::string> specials;
        for (const auto& [key, spec] : named) specials.push_back(spec->content);
        for (auto& [index, spec] : parse_added_tokens_decoder(config, config_path, specials))
            tokens.added.push_back(std::move(spec));
        for (const auto& [key, spec] : named) {
            for (const TokenSpec& added : tokens.added) {
                if (added.content == spec->content) spec->normalized = added.normalized;
            }
        }
    } else if (std::filesystem::exists(map_path, ec)) {
        const Json map = parse_json_file(map_path);
        if (!map.is_object()) throw FormatError(map_path.string(), "must be a JSON object");
        for (const auto& [key, spec] : named) {
            if (map.contains(key) && !map[key].is_null()) {
                *spec = parse_token(map[key], true, map_path, key);
            }
        }
    }
    if (!config.contains("added_tokens_decoder") && json_added) {
        // Without an added_tokens_decoder, transformers takes tokenizer.json's added tokens, and
        // the special tokens named above take their flags.
        tokens.added = json_added();
        for (const auto& [key, spec] : named) {
            for (const TokenSpec& added : tokens.added) {
                if (added.content == spec->content) spec->normalized = added.normalized;
            }
        }
    }
    if (config.contains("model_max_length")) {
        const Json& value = config["model_max_length"];
        if (!value.is_number_integer() || value.get<long long>() < 2 ||
            value.get<long long>() > std::numeric_limits<int>::max()) {
            throw FormatError(config_path.string(),
                              "model_max_length must be an integer from 2 to 2147483647, not " +
                                  value.dump() + " (CLIP text encoders take 77)");
        }
        tokens.max_length = value.get<int>();
    }
    return tokens;
}

std::unordered_map<std::string, int64_t> parse_vocab(const Json& json,
                                                     const std::filesystem::path& path,
                                                     const std::string& key) {
    if (!json.is_object()) {
        throw FormatError(path.string(), (key.empty() ? "" : key + " ") +
                                             "must be a JSON object mapping tokens to ids");
    }
    std::unordered_map<std::string, int64_t> vocab;
    vocab.reserve(json.size());
    for (const auto& [token, id] : json.items()) {
        if (!id.is_number_integer() || id.get<long long>() < 0 ||
            id.get<long long>() > std::numeric_limits<std::uint32_t>::max()) {
            throw FormatError(path.string(),
                              (key.empty() ? "" : key + ": ") + "the id of token \"" + token +
                                  "\" must be an integer in [0, 2^32), not " + id.dump());
        }
        vocab.emplace(token, id.get<int64_t>());
    }
    return vocab;
}

const Json& tokenizer_json_model(const Json& root, const std::filesystem::path& path) {
    if (!root.is_object()) throw FormatError(path.string(), "must be a JSON object");
    if (!root.contains("model") || !root["model"].is_object()) {
        throw FormatError(path.string(), "has no \"model\" object");
    }
    const Json& model = root["model"];
    // Old serializations leave out "type"; tokenizers then infers it from the fields.
    if (model.contains("type") && model["type"] != "BPE") {
        throw FormatError(path.string(),
                          "model.type must be \"BPE\" (CLIP's tokenizer is byte-level "
                          "BPE), not " +
                              model["type"].dump());
    }
    if (!model.contains("vocab")) {
        throw FormatError(path.string(), "has no model.vocab (an object mapping tokens to ids)");
    }
    if (!model.contains("merges") || !model["merges"].is_array()) {
        throw FormatError(path.string(),
                          "model.merges must be an array of merges, not " +
                              (model.contains("merges") ? model["merges"].dump() : "missing"));
    }
    const Json suffix = model.contains("end_of_word_suffix") ? model["end_of_word_suffix"] : Json();
    if (!suffix.is_string() || suffix.get_ref<const std::string&>() != kEndOfWord) {
        throw FormatError(
            path.string(),
            "model.end_of_word_suffix must be \"</w>\" as in CLIP's vocabulary, not " +
                (model.contains("end_of_word_suffix") ? suffix.dump() : "missing"));
    }
    if (model.contains("unk_token") && !model["unk_token"].is_null() &&
        !model["unk_token"].is_string()) {
        throw FormatError(path.string(), "model.unk_token must be a string or null, not " +
                                             model["unk_token"].dump());
    }
    return model;
}

}  // namespace loom::clip_tokenizer_detail
