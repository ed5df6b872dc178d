#include "loom/model/tokenizers/t5_tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "loading/json_file.h"
#include "loom/core/error.h"
#include "loom/core/utf8.h"
#include "loom/model/tokenizers/unicode_tables.h"
#include "precompiled_charsmap.h"
#include "unigram_model.h"
#include "utf8_walk.h"

namespace loom {

namespace {

using Json = nlohmann::json;

const std::string kMetaspace = "\xE2\x96\x81";  // U+2581 "▁"

// The "Precompiled" normalizer's charsmap, alone or anywhere inside a Sequence (transformers
// extracts it the same way), or nothing.
std::optional<std::string> find_charsmap(const Json& normalizer, const std::string& key,
                                         const std::string& where) {
    if (!normalizer.is_object()) return std::nullopt;
    const std::string type = normalizer.value("type", "");
    if (type == "Precompiled") {
        const auto it = normalizer.find("precompiled_charsmap");
        if (it == normalizer.end() || it->is_null()) return std::nullopt;
        if (!it->is_string()) {
            throw FormatError(where, key + ".precompiled_charsmap must be a base64 string");
        }
        return decode_base64(it->get<std::string>(), where + ": " + key + ".precompiled_charsmap");
    }
    if (type == "Sequence" && normalizer.contains("normalizers") &&
        normalizer["normalizers"].is_array()) {
        const Json& list = normalizer["normalizers"];
        for (std::size_t i = 0; i < list.size(); ++i) {
            if (auto found =
                    find_charsmap(list[i], key + ".normalizers." + std::to_string(i), where)) {
                return found;
            }
        }
    }
    return std::nullopt;
}

struct AddedToken {
    std::string content;
    std::int64_t id;
};

// Leftmost-longest split of `text` on the added tokens: calls piece(text) for each stretch
// between them and token(id) for each.
template <typename Piece, typename Token>
void split_added(std::string_view text, const std::vector<AddedToken>& added, Piece piece,
                 Token token) {
    std::size_t start = 0;
    for (std::size_t pos = 0; pos < text.size();) {
        const AddedToken* match = nullptr;
        for (const AddedToken& a : added) {
            if (a.content.size() > (match ? match->content.size() : 0) &&
                text.compare(pos, a.content.size(), a.content) == 0) {
                match = &a;
            }
        }
        if (!match) {
            ++pos;
            continue;
        }
        if (pos > start) piece(text.substr(start, pos - start));
        token(match->id);
        pos += match->content.size();
        start = pos;
    }
    if (start < text.size()) piece(text.substr(start));
}

// WhitespaceSplit: the words of `text` between runs of Unicode White_Space.
std::vector<std::string_view> whitespace_split(std::string_view text) {
    std::vector<std::string_view> words;
    std::size_t start = std::string_view::npos;
    for (std::size_t pos = 0; pos < text.size();) {
        const std::size_t length = utf8_walk::length_at(text, pos);
        const bool space = unicode::is_whitespace(utf8_walk::decode(text, pos, length));
        if (space && start != std::string_view::npos) {
            words.push_back(text.substr(start, pos - start));
            start = std::string_view::npos;
        } else if (!space && start == std::string_view::npos) {
            start = pos;
        }
        pos += length;
    }
    if (start != std::string_view::npos) words.push_back(text.substr(start));
    return words;
}

}  // namespace

struct T5Tokenizer::State {
    std::optional<PrecompiledCharsmap> charsmap;
    UnigramModel unigram;
    std::vector<AddedToken> added;
    std::int64_t pad_id;
    std::int64_t eos_id;
};

T5Tokenizer::T5Tokenizer(std::shared_ptr<const State> state) : state_(std::move(state)) {}

T5Tokenizer T5Tokenizer::from_folder(const std::filesystem::path& dir) {
    const std::filesystem::path json = dir / "tokenizer.json";
    std::error_code ec;
    if (!std::filesystem::exists(json, ec) && std::filesystem::exists(dir / "spiece.model", ec)) {
        throw IoError(json.string(),
                      "does not exist: loom reads T5 tokenizers from tokenizer.json, and this "
                      "folder has only spiece.model; write one with `python -c \"from "
                      "transformers import T5Tokenizer; T5Tokenizer.from_pretrained('" +
                          dir.string() + "').save_pretrained('" + dir.string() + "')\"`");
    }
    return from_file(json);
}

T5Tokenizer T5Tokenizer::from_file(const std::filesystem::path& tokenizer_json) {
    const std::string where = tokenizer_json.string();
    const Json root = parse_json_file(tokenizer_json);
    if (!root.is_object() || !root.contains("model") || !root["model"].is_object()) {
        throw FormatError(where, "has no \"model\" object (not a tokenizers serialization)");
    }
    const Json& model = root["model"];
    if (model.value("type", "") != "Unigram") {
        throw FormatError(where, "model.type is " + model.value("type", std::string("absent")) +
                                     ", not Unigram: this is not a T5 tokenizer");
    }
    if (!model.contains("vocab") || !model["vocab"].is_array() || model["vocab"].empty()) {
        throw FormatError(where, "model.vocab must be a non-empty list of [piece, score]");
    }
    std::vector<std::pair<std::string, double>> vocab;
    vocab.reserve(model["vocab"].size());
    for (std::size_t i = 0; i < model["vocab"].size(); ++i) {
        const Json& entry = model["vocab"][i];
        if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() ||
            !entry[1].is_number()) {
            throw FormatError(where, "model.vocab." + std::to_string(i) +
                                         " must be [piece, score], not " + entry.dump());
        }
        vocab.emplace_back(entry[0].get<std::string>(), entry[1].get<double>());
    }
    const Json unk = model.value("unk_id", Json());
    if (!unk.is_number_integer() || unk.get<std::int64_t>() < 0 ||
        unk.get<std::size_t>() >= vocab.size()) {
        throw FormatError(where, "model.unk_id must be an id of model.vocab, not " + unk.dump());
    }
    auto state = std::make_shared<State>(
        State{std::nullopt, UnigramModel(std::move(vocab), unk.get<std::int64_t>()), {}, -1, -1});
    if (root.contains("normalizer")) {
        if (auto blob = find_charsmap(root["normalizer"], "normalizer", where)) {
            state->charsmap.emplace(*blob, where + ": normalizer.precompiled_charsmap");
        }
    }
    if (root.contains("added_tokens")) {
        const Json& added = root["added_tokens"];
        if (!added.is_array()) throw FormatError(where, "added_tokens must be a list");
        for (std::size_t i = 0; i < added.size(); ++i) {
            const Json& t = added[i];
            const std::string key = "added_tokens." + std::to_string(i);
            if (!t.is_object() || !t.contains("content") || !t["content"].is_string() ||
                !t.contains("id") || !t["id"].is_number_integer()) {
                throw FormatError(where, key + " must have a string content and an integer id");
            }
            for (const char* flag : {"lstrip", "rstrip", "single_word", "normalized"}) {
                if (t.value(flag, false)) {
                    throw FormatError(where, key + " (" + t["content"].get<std::string>() +
                                                 ") sets " + flag +
                                                 ", which T5 tokenizers never do; loom does "
                                                 "not implement it");
                }
            }
            if (!t["content"].get<std::string>().empty()) {
                state->added.push_back(
                    {t["content"].get<std::string>(), t["id"].get<std::int64_t>()});
            }
        }
    }
    const auto special = [&](const char* piece) {
        for (const AddedToken& a : state->added) {
            if (a.content == piece) return a.id;
        }
        const std::int64_t id = state->unigram.id_of(piece);
        if (id < 0) {
            throw FormatError(where, std::string("has no \"") + piece +
                                         "\" token (neither in added_tokens nor in model.vocab)");
        }
        return id;
    };
    state->pad_id = special("<pad>");
    state->eos_id = special("</s>");
    return T5Tokenizer(std::move(state));
}

std::vector<std::int64_t> T5Tokenizer::tokenize(std::string_view text) const {
    if (const auto bad = find_invalid_utf8(text)) {
        std::ostringstream msg;
        msg << "T5 tokenizer: the text is not valid UTF-8 (line " << bad->line << ", column "
            << bad->column << ", byte offset " << bad->offset
            << "); re-save the caption or prompt as UTF-8";
        throw Error(msg.str());
    }
    std::vector<std::int64_t> ids;
    const State& s = *state_;
    split_added(
        text, s.added,
        [&](std::string_view piece) {
            const std::string normalized =
                s.charsmap ? s.charsmap->normalize(piece) : std::string(piece);
            for (const std::string_view word : whitespace_split(normalized)) {
                // Metaspace: "▁" in front unless there is one, then a new piece at each "▁".
                const std::string marked = word.substr(0, kMetaspace.size()) == kMetaspace
                                               ? std::string(word)
                                               : kMetaspace + std::string(word);
                std::size_t start = 0;
                while (start < marked.size()) {
                    std::size_t next = marked.find(kMetaspace, start + kMetaspace.size());
                    if (next == std::string::npos) next = marked.size();
                    s.unigram.encode(std::string_view(marked).substr(start, next - start), ids);
                    start = next;
                }
            }
        },
        [&](std::int64_t id) { ids.push_back(id); });
    return ids;
}

std::vector<std::int64_t> T5Tokenizer::encode(std::string_view text, std::size_t max_length) const {
    if (max_length < 1) throw Error("T5 tokenizer: max_length must be at least 1");
    std::vector<std::int64_t> ids = tokenize(text);
    if (ids.size() > max_length - 1) ids.resize(max_length - 1);
    ids.push_back(state_->eos_id);
    ids.resize(max_length, state_->pad_id);
    return ids;
}

std::int64_t T5Tokenizer::pad_id() const {
    return state_->pad_id;
}
std::int64_t T5Tokenizer::eos_id() const {
    return state_->eos_id;
}
std::size_t T5Tokenizer::vocab_size() const {
    return state_->unigram.size();
}

}  // namespace loom
