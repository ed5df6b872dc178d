#pragma once

// Reading a diffusers tokenizer folder's files for the CLIP tokenizer (clip_tokenizer.h,
// CLIPTokenizer::from_folder): the vocabulary (vocab.json or tokenizer.json's model), and the
// special and added tokens (tokenizer_config.json, special_tokens_map.json, tokenizer.json's
// added_tokens) as transformers resolves them. Malformed contents throw FormatError naming the
// file and the key; missing or unreadable files throw IoError. Internal to the model layer.

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace loom::clip_tokenizer_detail {

using Json = nlohmann::json;

inline constexpr std::string_view kEndOfWord = "</w>";
inline constexpr const char* kStartOfText = "<|startoftext|>";
inline constexpr const char* kEndOfText = "<|endoftext|>";

// A special or added token as transformers resolves it from the config files.
struct TokenSpec {
    std::string content;
    bool normalized = false;
};

struct SpecialTokens {
    TokenSpec bos{kStartOfText, false};
    TokenSpec eos{kEndOfText, false};
    TokenSpec unk{kEndOfText, false};
    TokenSpec pad{kEndOfText, false};
    std::vector<TokenSpec> added;  // from added_tokens_decoder, in id order
    int max_length = 77;
};

// The whole file as bytes.
std::string read_file(const std::filesystem::path& path);
Json parse_json_file(const std::filesystem::path& path);

// tokenizer.json's "added_tokens" as transformers reads them (AddedToken(**entry), so "special"
// defaults to false and "normalized" to not special), keyed and ordered by id; a repeated id keeps
// its last entry. The ids are checked against the vocabulary later (CLIPTokenizer::from_folder).
std::map<long long, TokenSpec> parse_added_tokens(const Json& root,
                                                  const std::filesystem::path& path);

// tokenizer_config.json's "added_tokens_decoder" (which `config` must contain) by id: each token's
// flags as transformers reads them, "normalized" defaulting to false for special tokens — those
// whose "special" is true or whose content is one of `specials`.
std::map<long long, TokenSpec> parse_added_tokens_decoder(const Json& config,
                                                          const std::filesystem::path& path,
                                                          const std::vector<std::string>& specials);

// `json_added`: tokenizer.json's added tokens (parsed only when transformers reads them).
SpecialTokens read_special_tokens(
    const std::filesystem::path& dir,
    const std::function<std::vector<TokenSpec>()>& json_added = nullptr);

// A token -> id object: vocab.json, or tokenizer.json's model.vocab (`key` "model.vocab").
std::unordered_map<std::string, int64_t> parse_vocab(const Json& json,
                                                     const std::filesystem::path& path,
                                                     const std::string& key);

// tokenizer.json's "model", checked to be CLIP's byte-level BPE. Returns it; the vocabulary and
// merges are read by the caller.
const Json& tokenizer_json_model(const Json& root, const std::filesystem::path& path);

}  // namespace loom::clip_tokenizer_detail
