#include "loom/model/tokenizers/qwen2_tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <type_traits>
#include <utility>

#include "byte_level_bpe.h"
#include "clip_tokenizer_files.h"
#include "clip_tokenizer_text.h"
#include "loom/core/error.h"
#include "qwen2_pre_tokenizer.h"

namespace loom {

using clip_tokenizer_detail::Json;

namespace {

struct Qwen2AddedToken {
    std::string content;  // UTF-8
    std::u32string content32;
    int64_t id;
};

// Leftmost-longest matching of added tokens in `text`, calling `segment` for the text between
// them and `token` for each match (tokenizers' AddedVocabulary split).
template <typename Text, typename Segment>
void split_qwen2_added_tokens(Text text, const std::vector<Qwen2AddedToken>& tokens,
                              Segment segment, std::vector<int64_t>& ids) {
    std::size_t begin = 0;
    for (std::size_t i = 0; i < text.size();) {
        const Qwen2AddedToken* match = nullptr;
        std::size_t match_size = 0;
        for (const Qwen2AddedToken& token : tokens) {
            const auto size = [&] {
                if constexpr (std::is_same_v<Text, std::string_view>) {
                    return token.content.size();
                } else {
                    return token.content32.size();
                }
            }();
            const bool here = [&] {
                if constexpr (std::is_same_v<Text, std::string_view>) {
                    return text.compare(i, size, token.content) == 0;
                } else {
                    return clip_tokenizer_detail::starts_with(text, i, token.content32);
                }
            }();
            if (here && size > match_size) {
                match = &token;
                match_size = size;
            }
        }
        if (match == nullptr) {
            ++i;
            continue;
        }
        if (i > begin) segment(text.substr(begin, i - begin));
        ids.push_back(match->id);
        i += match_size;
        begin = i;
    }
    if (begin < text.size()) segment(text.substr(begin));
}

// Whether tokenizer_config.json sets `key` to "left" (absent: "right").
bool qwen2_side_is_left(const Json& config, const char* key, const std::filesystem::path& path) {
    if (!config.contains(key) || config[key].is_null()) return false;
    const Json& v = config[key];
    if (v != "left" && v != "right") {
        throw FormatError(path.string(),
                          std::string(key) + " must be \"left\" or \"right\", not " + v.dump());
    }
    return v == "left";
}

}  // namespace

struct Qwen2Tokenizer::State {
    State(std::unordered_map<std::string, int64_t> vocab, const std::filesystem::path& path,
          bool ignore_merges)
        : bpe(std::move(vocab), path, "model.vocab", "", ignore_merges) {}

    tokenizer_detail::ByteLevelBpe bpe;
    std::vector<Qwen2AddedToken> raw_tokens;         // "normalized": false
    std::vector<Qwen2AddedToken> normalized_tokens;  // matched after NFC
    std::size_t size = 0;
    int64_t pad = 0;
    bool pad_left = false;
    bool truncate_left = false;

    void pieces(std::u32string_view text, std::vector<int64_t>& ids) const {
        std::vector<std::u32string_view> pieces;
        tokenizer_detail::qwen2_pre_tokenize(text, pieces);
        for (std::u32string_view piece : pieces) {
            // No unk token: every byte has its symbol in a byte-level vocabulary.
            bpe.encode(clip_tokenizer_detail::to_utf8(piece), -1, ids);
        }
    }

    void tokenize(std::string_view text, std::vector<int64_t>& ids) const {
        clip_tokenizer_detail::check_utf8(text, "Qwen2 tokenizer");
        split_qwen2_added_tokens(
            text, raw_tokens,
            [&](std::string_view part) {
                const std::u32string composed =
                    clip_tokenizer_detail::nfc(clip_tokenizer_detail::from_valid_utf8(part));
                split_qwen2_added_tokens(
                    std::u32string_view(composed), normalized_tokens,
                    [&](std::u32string_view rest) { pieces(rest, ids); }, ids);
            },
            ids);
    }
};

Qwen2Tokenizer::Qwen2Tokenizer(std::shared_ptr<const State> state) : state_(std::move(state)) {}

namespace {

using clip_tokenizer_detail::TokenSpec;

// The special-token words of a folder's tokenizer_config.json and special_tokens_map.json
// (bos/eos/unk/pad_token, additional_special_tokens): what transformers calls special when it
// reads added_tokens.json.
std::vector<std::string> qwen2_special_words(const std::filesystem::path& dir) {
    std::vector<std::string> words;
    for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
        const std::filesystem::path path = dir / name;
        std::error_code ec;
        if (!std::filesystem::exists(path, ec)) continue;
        const Json json = clip_tokenizer_detail::parse_json_file(path);
        if (!json.is_object()) throw FormatError(path.string(), "must be a JSON object");
        const auto add = [&](const Json& value) {
            if (value.is_string()) words.push_back(value.get<std::string>());
            if (value.is_object() && value.contains("content") && value["content"].is_string())
                words.push_back(value["content"].get<std::string>());
        };
        for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
            if (json.contains(key)) add(json[key]);
        }
        for (const char* key : {"additional_special_tokens", "extra_special_tokens"}) {
            if (json.contains(key) && json[key].is_array()) {
                for (const Json& value : json[key]) add(value);
            }
        }
    }
    return words;
}

// A folder without tokenizer.json, as transformers 5 builds Qwen2Tokenizer from it: the BPE of
// vocab.json and merges.txt, the added tokens of tokenizer_config.json's added_tokens_decoder or,
// without one, of added_tokens.json (special ones not normalized). Returns the added tokens by id.
std::map<long long, TokenSpec> qwen2_added_tokens_of_files(const std::filesystem::path& dir) {
    const std::filesystem::path config_path = dir / "tokenizer_config.json";
    std::error_code ec;
    if (std::filesystem::exists(config_path, ec)) {
        const Json config = clip_tokenizer_detail::parse_json_file(config_path);
        if (config.is_object() && config.contains("added_tokens_decoder")) {
            return clip_tokenizer_detail::parse_added_tokens_decoder(config, config_path, {});
        }
    }
    std::map<long long, TokenSpec> by_id;
    const std::filesystem::path added_path = dir / "added_tokens.json";
    if (!std::filesystem::exists(added_path, ec)) return by_id;
    const Json added = clip_tokenizer_detail::parse_json_file(added_path);
    const std::vector<std::string> specials = qwen2_special_words(dir);
    for (const auto& [content, id] : clip_tokenizer_detail::parse_vocab(added, added_path, "")) {
        const bool special = std::find(specials.begin(), specials.end(), content) != specials.end();
        by_id[id] = TokenSpec{content, !special};
    }
    return by_id;
}

}  // namespace

Qwen2Tokenizer Qwen2Tokenizer::from_folder(const std::filesystem::path& dir) {
    const std::filesystem::path tokenizer_json = dir / "tokenizer.json";
    const std::filesystem::path vocab_json = dir / "vocab.json";
    const std::filesystem::path merges_txt = dir / "merges.txt";
    const std::filesystem::path config_path = dir / "tokenizer_config.json";
    std::error_code ec;
    std::shared_ptr<State> state;
    std::map<long long, TokenSpec> added;
    // What the vocabulary's errors name: tokenizer.json, or vocab.json for the older layout.
    std::filesystem::path vocab_file = tokenizer_json;
    if (std::filesystem::exists(tokenizer_json, ec)) {
        const Json root = clip_tokenizer_detail::parse_json_file(tokenizer_json);
        if (!root.is_object() || !root.contains("model") || !root["model"].is_object()) {
            throw FormatError(tokenizer_json.string(), "has no \"model\" object");
        }
        const Json& model = root["model"];
        if (model.contains("type") && model["type"] != "BPE") {
            throw FormatError(
                tokenizer_json.string(),
                "model.type must be \"BPE\" (Qwen's tokenizer is byte-level BPE), not " +
                    model["type"].dump());
        }
        if (!model.contains("merges") || !model["merges"].is_array()) {
            throw FormatError(tokenizer_json.string(), "model.merges must be an array of merges");
        }
        const bool ignore_merges = model.value("ignore_merges", false);
        state = std::make_shared<State>(
            clip_tokenizer_detail::parse_vocab(model.value("vocab", Json()), tokenizer_json,
                                               "model.vocab"),
            tokenizer_json, ignore_merges);
        state->bpe.load_merges_json(model["merges"], tokenizer_json);
        added = clip_tokenizer_detail::parse_added_tokens(root, tokenizer_json);
    } else if (std::filesystem::exists(vocab_json, ec) && std::filesystem::exists(merges_txt, ec)) {
        // The layout of folders saved before tokenizer.json (Qwen-Image's own tokenizer/).
        vocab_file = vocab_json;
        state = std::make_shared<State>(
            clip_tokenizer_detail::parse_vocab(clip_tokenizer_detail::parse_json_file(vocab_json),
                                               vocab_json, ""),
            vocab_json, false);
        state->bpe.load_merges_txt(merges_txt);
        added = qwen2_added_tokens_of_files(dir);
    } else {
        throw IoError(
            tokenizer_json.string(),
            "not found, nor vocab.json and merges.txt beside it (a Qwen tokenizer folder "
            "has tokenizer.json, or vocab.json and merges.txt with tokenizer_config.json)");
    }

    std::unordered_map<std::string, int64_t> ids(state->bpe.vocab());
    for (auto& [id, spec] : added) {
        if (spec.content.empty()) continue;
        clip_tokenizer_detail::check_utf8(spec.content, "Qwen2 tokenizer");
        Qwen2AddedToken token{spec.content, clip_tokenizer_detail::from_valid_utf8(spec.content),
                              id};
        ids[spec.content] = id;
        (spec.normalized ? state->normalized_tokens : state->raw_tokens).push_back(token);
    }

    Json config = Json::object();
    if (std::filesystem::exists(config_path, ec)) {
        config = clip_tokenizer_detail::parse_json_file(config_path);
        if (!config.is_object()) throw FormatError(config_path.string(), "must be a JSON object");
    }
    std::string pad = "<|endoftext|>";
    if (config.contains("pad_token") && !config["pad_token"].is_null()) {
        const Json& value = config["pad_token"];
        if (value.is_string()) {
            pad = value.get<std::string>();
        } else if (value.is_object() && value.contains("content") && value["content"].is_string()) {
            pad = value["content"].get<std::string>();
        } else {
            throw FormatError(config_path.string(),
                              "pad_token must be a string or an object with a string "
                              "\"content\", not " +
                                  value.dump());
        }
    }
    auto pad_id = ids.find(pad);
    if (pad_id == ids.end() && vocab_file == vocab_json) {
        // Qwen2Tokenizer adds its special tokens that the files lack after everything else, as
        // special (not normalized) tokens.
        const auto id = static_cast<int64_t>(ids.size());
        state->raw_tokens.push_back({pad, clip_tokenizer_detail::from_valid_utf8(pad), id});
        pad_id = ids.emplace(pad, id).first;
    }
    if (pad_id == ids.end()) {
        throw FormatError(
            vocab_file.string(),
            "the pad token \"" + pad + "\" is neither in the vocabulary nor in the added tokens");
    }
    state->size = ids.size();
    state->pad = pad_id->second;
    state->pad_left = qwen2_side_is_left(config, "padding_side", config_path);
    state->truncate_left = qwen2_side_is_left(config, "truncation_side", config_path);
    return Qwen2Tokenizer(std::move(state));
}

std::vector<int64_t> Qwen2Tokenizer::tokenize(std::string_view text) const {
    std::vector<int64_t> ids;
    state_->tokenize(text, ids);
    return ids;
}

Qwen2Tokenizer::Encoding Qwen2Tokenizer::encode(std::string_view text,
                                                std::size_t max_length) const {
    return padded(truncated(tokenize(text), max_length), max_length);
}

std::vector<int64_t> Qwen2Tokenizer::truncated(std::vector<int64_t> ids,
                                               std::size_t max_length) const {
    if (ids.size() > max_length) {
        const auto cut = static_cast<std::ptrdiff_t>(ids.size() - max_length);
        if (state_->truncate_left) {
            ids.erase(ids.begin(), ids.begin() + cut);
        } else {
            ids.resize(max_length);
        }
    }
    return ids;
}

Qwen2Tokenizer::Encoding Qwen2Tokenizer::padded(std::vector<int64_t> ids,
                                                std::size_t length) const {
    if (ids.size() > length) {
        throw Error("Qwen2 tokenizer: " + std::to_string(ids.size()) +
                    " ids do not pad to a length of " + std::to_string(length));
    }
    const std::size_t padding = length - ids.size();
    Encoding out;
    out.mask.assign(ids.size(), 1);
    if (state_->pad_left) {
        out.ids.assign(padding, state_->pad);
        out.ids.insert(out.ids.end(), ids.begin(), ids.end());
        out.mask.insert(out.mask.begin(), padding, 0);
    } else {
        out.ids = std::move(ids);
        out.ids.resize(length, state_->pad);
        out.mask.resize(length, 0);
    }
    return out;
}

int64_t Qwen2Tokenizer::pad_id() const {
    return state_->pad;
}

std::size_t Qwen2Tokenizer::size() const {
    return state_->size;
}

}  // namespace loom
