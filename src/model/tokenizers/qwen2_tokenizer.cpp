#include "loom/model/tokenizers/qwen2_tokenizer.h"

#include <nlohmann/json.hpp>

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

Qwen2Tokenizer Qwen2Tokenizer::from_folder(const std::filesystem::path& dir) {
    const std::filesystem::path tokenizer_json = dir / "tokenizer.json";
    const std::filesystem::path config_path = dir / "tokenizer_config.json";
    std::error_code ec;
    if (!std::filesystem::exists(tokenizer_json, ec)) {
        throw IoError(tokenizer_json.string(),
                      "not found (a Qwen tokenizer folder has tokenizer.json; re-save an older "
                      "one with transformers' save_pretrained)");
    }
    const Json root = clip_tokenizer_detail::parse_json_file(tokenizer_json);
    if (!root.is_object() || !root.contains("model") || !root["model"].is_object()) {
        throw FormatError(tokenizer_json.string(), "has no \"model\" object");
    }
    const Json& model = root["model"];
    if (model.contains("type") && model["type"] != "BPE") {
        throw FormatError(tokenizer_json.string(),
                          "model.type must be \"BPE\" (Qwen's tokenizer is byte-level BPE), not " +
                              model["type"].dump());
    }
    if (!model.contains("merges") || !model["merges"].is_array()) {
        throw FormatError(tokenizer_json.string(), "model.merges must be an array of merges");
    }
    const bool ignore_merges = model.value("ignore_merges", false);
    auto state =
        std::make_shared<State>(clip_tokenizer_detail::parse_vocab(model.value("vocab", Json()),
                                                                   tokenizer_json, "model.vocab"),
                                tokenizer_json, ignore_merges);
    state->bpe.load_merges_json(model["merges"], tokenizer_json);

    std::unordered_map<std::string, int64_t> ids(state->bpe.vocab());
    for (auto& [id, spec] : clip_tokenizer_detail::parse_added_tokens(root, tokenizer_json)) {
        if (spec.content.empty()) continue;
        clip_tokenizer_detail::check_utf8(spec.content, "Qwen2 tokenizer");
        Qwen2AddedToken token{spec.content, clip_tokenizer_detail::from_valid_utf8(spec.content),
                              id};
        ids[spec.content] = id;
        (spec.normalized ? state->normalized_tokens : state->raw_tokens).push_back(token);
    }
    state->size = ids.size();

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
    const auto pad_id = ids.find(pad);
    if (pad_id == ids.end()) {
        throw FormatError(
            tokenizer_json.string(),
            "the pad token \"" + pad + "\" is neither in model.vocab nor in added_tokens");
    }
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
