#include "loom/model/clip_tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "loom/core/error.h"
#include "loom/core/utf8.h"
#include "loom/model/unicode_tables.h"

namespace loom {

namespace {

using Json = nlohmann::json;

constexpr std::string_view kEndOfWord = "</w>";
constexpr const char* kStartOfText = "<|startoftext|>";
constexpr const char* kEndOfText = "<|endoftext|>";

// ---------------------------------------------------------------------------------------------
// UTF-8

void append_utf8(char32_t c, std::string& out) {
    if (c < 0x80) {
        out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (c >> 6)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (c >> 12)));
        out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (c >> 18)));
        out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
}

std::string to_utf8(std::u32string_view text) {
    std::string out;
    out.reserve(text.size());
    for (char32_t c : text) append_utf8(c, out);
    return out;
}

// Decodes text that find_invalid_utf8() has accepted.
std::u32string from_valid_utf8(std::string_view text) {
    std::u32string out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size();) {
        const auto b0 = static_cast<unsigned char>(text[i]);
        std::size_t len = 1;
        char32_t c = b0;
        if (b0 >= 0xF0) {
            len = 4;
            c = b0 & 0x07;
        } else if (b0 >= 0xE0) {
            len = 3;
            c = b0 & 0x0F;
        } else if (b0 >= 0xC0) {
            len = 2;
            c = b0 & 0x1F;
        }
        for (std::size_t k = 1; k < len; ++k) {
            c = (c << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
        }
        out.push_back(c);
        i += len;
    }
    return out;
}

void check_utf8(std::string_view text) {
    if (const auto bad = find_invalid_utf8(text)) {
        std::ostringstream msg;
        msg << "CLIP tokenizer: the text is not valid UTF-8 (line " << bad->line << ", column "
            << bad->column << ", byte offset " << bad->offset
            << "); re-save the caption or prompt as UTF-8";
        throw Error(msg.str());
    }
}

// ---------------------------------------------------------------------------------------------
// Normalization: NFC, whitespace runs to one space, lower-casing (the reference's
// normalizers.Sequence([NFC(), Replace(Regex(r"\s+"), " "), Lowercase()])).

// Hangul syllables decompose and compose arithmetically (The Unicode Standard, section 3.12).
constexpr char32_t kHangulSBase = 0xAC00;
constexpr char32_t kHangulLBase = 0x1100;
constexpr char32_t kHangulVBase = 0x1161;
constexpr char32_t kHangulTBase = 0x11A7;
constexpr char32_t kHangulLCount = 19;
constexpr char32_t kHangulVCount = 21;
constexpr char32_t kHangulTCount = 28;
constexpr char32_t kHangulNCount = kHangulVCount * kHangulTCount;
constexpr char32_t kHangulSCount = kHangulLCount * kHangulNCount;

void append_decomposed(char32_t c, std::u32string& out) {
    if (c >= kHangulSBase && c < kHangulSBase + kHangulSCount) {
        const char32_t index = c - kHangulSBase;
        out.push_back(kHangulLBase + index / kHangulNCount);
        out.push_back(kHangulVBase + (index % kHangulNCount) / kHangulTCount);
        if (index % kHangulTCount != 0) out.push_back(kHangulTBase + index % kHangulTCount);
        return;
    }
    const std::u32string_view d = unicode::canonical_decomposition(c);
    if (d.empty()) {
        out.push_back(c);
    } else {
        out.append(d);
    }
}

char32_t compose(char32_t first, char32_t second) {
    if (first >= kHangulLBase && first < kHangulLBase + kHangulLCount && second >= kHangulVBase &&
        second < kHangulVBase + kHangulVCount) {
        return kHangulSBase +
               ((first - kHangulLBase) * kHangulVCount + (second - kHangulVBase)) * kHangulTCount;
    }
    if (first >= kHangulSBase && first < kHangulSBase + kHangulSCount &&
        (first - kHangulSBase) % kHangulTCount == 0 && second > kHangulTBase &&
        second < kHangulTBase + kHangulTCount) {
        return first + (second - kHangulTBase);
    }
    return unicode::primary_composite(first, second);
}

std::u32string nfc(std::u32string_view text) {
    // Canonical decomposition, then canonical ordering (a stable sort of each run of non-starters
    // by combining class).
    std::u32string d;
    d.reserve(text.size());
    for (char32_t c : text) append_decomposed(c, d);
    for (std::size_t i = 0; i < d.size();) {
        if (unicode::combining_class(d[i]) == 0) {
            ++i;
            continue;
        }
        std::size_t j = i;
        while (j < d.size() && unicode::combining_class(d[j]) != 0) ++j;
        std::stable_sort(d.begin() + static_cast<std::ptrdiff_t>(i),
                         d.begin() + static_cast<std::ptrdiff_t>(j), [](char32_t a, char32_t b) {
                             return unicode::combining_class(a) < unicode::combining_class(b);
                         });
        i = j;
    }
    // Canonical composition: each character joins the last starter unless something between
    // them blocks it (a starter, or a non-starter of the same or higher class).
    std::u32string out;
    out.reserve(d.size());
    std::size_t starter = std::u32string::npos;
    std::uint8_t last_class = 0;  // class of the last character kept after the starter
    for (char32_t c : d) {
        const std::uint8_t cls = unicode::combining_class(c);
        if (starter != std::u32string::npos) {
            const bool adjacent = out.size() == starter + 1;
            if (adjacent || last_class < cls) {
                if (const char32_t composite = compose(out[starter], c)) {
                    out[starter] = composite;
                    continue;
                }
            }
        }
        if (cls == 0) {
            starter = out.size();
            last_class = 0;
        } else {
            last_class = cls;
        }
        out.push_back(c);
    }
    return out;
}

std::u32string normalize(std::u32string_view text) {
    bool ascii = true;
    for (char32_t c : text) ascii = ascii && c < 0x80;
    const std::u32string composed = ascii ? std::u32string(text) : nfc(text);
    std::u32string out;
    out.reserve(composed.size());
    for (std::size_t i = 0; i < composed.size();) {
        if (unicode::is_whitespace(composed[i])) {
            out.push_back(U' ');
            while (i < composed.size() && unicode::is_whitespace(composed[i])) ++i;
            continue;
        }
        unicode::append_lowercase(composed[i], out);
        ++i;
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenization

bool starts_with(std::u32string_view text, std::size_t pos, std::u32string_view prefix) {
    return text.size() - pos >= prefix.size() && text.compare(pos, prefix.size(), prefix) == 0;
}

// Splits normalized text the way CLIP's Split regex (matches kept, the rest dropped) followed by
// ByteLevel's GPT-2 regex does. The alternatives are tried in the regex's order at each position.
void pre_tokenize(std::u32string_view text, std::vector<std::u32string_view>& pieces) {
    static constexpr std::u32string_view kContractions[] = {U"'s", U"'t",  U"'re", U"'ve",
                                                            U"'m", U"'ll", U"'d"};
    static constexpr std::u32string_view kSpecials[] = {U"<|startoftext|>", U"<|endoftext|>"};
    const auto is_other = [](char32_t c) {
        return !unicode::is_whitespace(c) && !unicode::is_letter(c) && !unicode::is_number(c);
    };
    std::size_t i = 0;
    while (i < text.size()) {
        const char32_t c = text[i];
        if (unicode::is_whitespace(c)) {
            ++i;
            continue;
        }
        std::size_t len = 0;
        for (std::u32string_view special : kSpecials) {
            if (starts_with(text, i, special)) {
                // GPT-2's regex splits the literal into "<|", the word and "|>".
                pieces.push_back(text.substr(i, 2));
                pieces.push_back(text.substr(i + 2, special.size() - 4));
                pieces.push_back(text.substr(i + special.size() - 2, 2));
                len = special.size();
                break;
            }
        }
        if (len != 0) {
            i += len;
            continue;
        }
        for (std::u32string_view contraction : kContractions) {
            if (starts_with(text, i, contraction)) {
                len = contraction.size();
                break;
            }
        }
        if (len == 0) {
            std::size_t j = i + 1;
            if (unicode::is_letter(c)) {
                while (j < text.size() && unicode::is_letter(text[j])) ++j;
            } else if (!unicode::is_number(c)) {
                while (j < text.size() && is_other(text[j])) ++j;
            }
            len = j - i;
        }
        pieces.push_back(text.substr(i, len));
        i += len;
    }
}

// ---------------------------------------------------------------------------------------------
// Files

std::string read_file(const std::filesystem::path& path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
        throw IoError(path.string(), std::filesystem::exists(path, ec)
                                         ? "is not a regular file"
                                         : "does not exist (a diffusers tokenizer folder has "
                                           "vocab.json and merges.txt)");
    }
    std::ifstream in(path, std::ios::binary);
    std::ostringstream buffer;
    buffer << in.rdbuf();
    if (!in.good() && !in.eof()) throw IoError(path.string(), "could not be read");
    return buffer.str();
}

Json parse_json_file(const std::filesystem::path& path) {
    try {
        return Json::parse(read_file(path));
    } catch (const Json::parse_error& e) {
        throw FormatError(path.string(), std::string("is not valid JSON: ") + e.what());
    }
}

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the others for
// U+0100 onwards, so that every byte is a visible character in vocab.json.
std::array<std::string, 256> byte_symbols() {
    std::array<std::string, 256> symbols;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        append_utf8(printable ? static_cast<char32_t>(b) : next++, symbols[b]);
    }
    return symbols;
}

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
                                                 "\": true, which loom's CLIP tokenizer does not "
                                                 "support");
        }
    }
    special = token_flag(value, "special", special, path, key) || special;
    return {value["content"].get<std::string>(),
            token_flag(value, "normalized", !special, path, key)};
}

// tokenizer.json's "added_tokens" as transformers reads them (AddedToken(**entry), so "special"
// defaults to false and "normalized" to not special), keyed and ordered by id; a repeated id keeps
// its last entry. The ids are checked against the vocabulary later (check_added_ids).
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

// `json_added`: tokenizer.json's added tokens (parsed only when transformers reads them).
SpecialTokens read_special_tokens(
    const std::filesystem::path& dir,
    const std::function<std::vector<TokenSpec>()>& json_added = nullptr) {
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
        const Json& decoder = config["added_tokens_decoder"];
        if (!decoder.is_object()) {
            throw FormatError(config_path.string(), "added_tokens_decoder must be an object");
        }
        std::vector<std::pair<long long, TokenSpec>> by_id;
        for (const auto& [id, value] : decoder.items()) {
            long long index = 0;
            try {
                index = std::stoll(id);
            } catch (const std::exception&) {
                throw FormatError(config_path.string(),
                                  "added_tokens_decoder key \"" + id + "\" is not a token id");
            }
            bool special = false;
            if (value.is_object() && value.contains("content")) {
                for (const auto& [key, spec] : named) {
                    special = special || value["content"] == spec->content;
                }
            }
            by_id.emplace_back(
                index, parse_token(value, special, config_path, "added_tokens_decoder." + id));
        }
        std::sort(by_id.begin(), by_id.end(),
                  [](const auto& a, const auto& b) { return a.first < b.first; });
        for (auto& [index, spec] : by_id) tokens.added.push_back(std::move(spec));
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

// A token -> id object: vocab.json, or tokenizer.json's model.vocab (`key` "model.vocab").
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

// tokenizer.json's "model", checked to be CLIP's byte-level BPE. Returns it; the vocabulary and
// merges are read by the caller.
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

}  // namespace

// ---------------------------------------------------------------------------------------------

class CLIPTokenizer::Impl {
  public:
    // Takes the vocabulary; `vocab_path` and `vocab_name` ("vocab.json", "model.vocab") name it in
    // error messages. Then the merges are added in rank order, and finally the special tokens.
    Impl(std::unordered_map<std::string, int64_t> vocabulary, std::filesystem::path vocab_path,
         std::string vocab_name);

    void load_merges_txt(const std::filesystem::path& path);
    void load_merges_json(const Json& merges, const std::filesystem::path& path);
    void set_special_tokens(const SpecialTokens& special, const std::string& source);

    void tokenize(std::string_view text, std::vector<int64_t>& ids) const;

    std::unordered_map<std::string, int64_t> vocab;
    int64_t bos = 0;
    int64_t eos = 0;
    int64_t unk = 0;
    int64_t pad = 0;
    int max_length = 77;

  private:
    struct Merge {
        std::uint32_t rank;
        int64_t new_id;
    };
    struct AddedToken {
        std::string content;  // UTF-8, for the raw text
        std::u32string content32;
        int64_t id;
    };

    static std::uint64_t pair_key(int64_t a, int64_t b) {
        return (static_cast<std::uint64_t>(a) << 32) | static_cast<std::uint64_t>(b);
    }

    // Adds the next merge; `where` ("line 3", "model.merges[2]") names it in error messages.
    void add_merge(const std::string& first, const std::string& second,
                   const std::filesystem::path& path, const std::string& where);
    void normalized_segment(std::u32string_view text, std::vector<int64_t>& ids) const;
    void add_piece(std::u32string_view piece, std::vector<int64_t>& ids) const;
    std::vector<int64_t> bpe(const std::string& piece) const;

    std::filesystem::path vocab_path_;
    std::string vocab_name_;
    std::uint32_t next_rank_ = 0;
    std::unordered_map<std::uint64_t, Merge> merges_;
    std::array<int64_t, 256> byte_id_{};       // id of the byte's symbol, -1 when absent
    std::array<int64_t, 256> byte_last_id_{};  // id of the byte's symbol + "</w>"
    std::vector<AddedToken> raw_tokens_;
    std::vector<AddedToken> normalized_tokens_;

    mutable std::mutex cache_mutex_;
    mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;
};

CLIPTokenizer::Impl::Impl(std::unordered_map<std::string, int64_t> vocabulary,
                          std::filesystem::path vocab_path, std::string vocab_name)
    : vocab(std::move(vocabulary)),
      vocab_path_(std::move(vocab_path)),
      vocab_name_(std::move(vocab_name)) {
    const std::array<std::string, 256> symbols = byte_symbols();
    for (int b = 0; b < 256; ++b) {
        const auto mid = vocab.find(symbols[b]);
        const auto last = vocab.find(symbols[b] + std::string(kEndOfWord));
        byte_id_[b] = mid == vocab.end() ? -1 : mid->second;
        byte_last_id_[b] = last == vocab.end() ? -1 : last->second;
    }
}

void CLIPTokenizer::Impl::set_special_tokens(const SpecialTokens& special,
                                             const std::string& source) {
    const auto id_of = [&](const std::string& token, const std::string& role) {
        const auto it = vocab.find(token);
        if (it == vocab.end()) {
            throw FormatError(vocab_path_.string(), "the " + role + " \"" + token + "\" (from " +
                                                        source + ") is not in the vocabulary");
        }
        return it->second;
    };
    bos = id_of(special.bos.content, "bos token");
    eos = id_of(special.eos.content, "eos token");
    unk = id_of(special.unk.content, "unk token");
    pad = id_of(special.pad.content, "pad token");
    max_length = special.max_length;
    if (max_length < 2) {
        throw FormatError(source, "max_length must be at least 2 (bos and eos), not " +
                                      std::to_string(max_length));
    }

    // Added tokens in the order transformers adds them; a later flag for the same content wins.
    std::vector<TokenSpec> order = special.added;
    for (const TokenSpec* spec : {&special.bos, &special.eos, &special.unk, &special.pad}) {
        const bool known = std::any_of(order.begin(), order.end(), [&](const TokenSpec& t) {
            return t.content == spec->content;
        });
        if (!known || special.added.empty()) order.push_back(*spec);
    }
    std::vector<std::pair<std::string, bool>> flags;
    for (const TokenSpec& spec : order) {
        auto it = std::find_if(flags.begin(), flags.end(),
                               [&](const auto& f) { return f.first == spec.content; });
        if (it == flags.end()) {
            flags.emplace_back(spec.content, spec.normalized);
        } else {
            it->second = spec.normalized;
        }
    }
    for (const auto& [content, normalized] : flags) {
        if (content.empty()) continue;
        check_utf8(content);
        AddedToken token{content, from_valid_utf8(content), id_of(content, "added token")};
        (normalized ? normalized_tokens_ : raw_tokens_).push_back(std::move(token));
    }
}

void CLIPTokenizer::Impl::add_merge(const std::string& first, const std::string& second,
                                    const std::filesystem::path& path, const std::string& where) {
    const auto lookup = [&](const std::string& token) {
        const auto it = vocab.find(token);
        if (it == vocab.end()) {
            throw FormatError(path.string(),
                              where + ": token \"" + token + "\" is not in " + vocab_name_);
        }
        return it->second;
    };
    const int64_t a = lookup(first);
    const int64_t b = lookup(second);
    const int64_t merged = lookup(first + second);
    // Like tokenizers' HashMap collect, a repeated merge keeps its last rank.
    merges_[pair_key(a, b)] = Merge{next_rank_++, merged};
}

// Splits "a b" (two non-empty tokens separated by one space) as tokenizers does; false when the
// line is not of that form.
bool split_merge(std::string_view line, std::string& first, std::string& second) {
    const std::size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos) {
        return false;
    }
    first.assign(line.substr(0, space));
    second.assign(line.substr(space + 1));
    return true;
}

void CLIPTokenizer::Impl::load_merges_txt(const std::filesystem::path& path) {
    const std::string text = read_file(path);
    std::size_t line_number = 0;
    std::string first;
    std::string second;
    for (std::size_t begin = 0; begin < text.size();) {
        std::size_t end = text.find('\n', begin);
        if (end == std::string::npos) end = text.size();
        std::string_view line(text.data() + begin, end - begin);
        begin = end + 1;
        ++line_number;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.substr(0, 8) == "#version") continue;
        if (!split_merge(line, first, second)) {
            throw FormatError(path.string(), "line " + std::to_string(line_number) +
                                                 " is not a merge (two tokens separated by one "
                                                 "space): \"" +
                                                 std::string(line) + "\"");
        }
        add_merge(first, second, path, "line " + std::to_string(line_number));
    }
}

void CLIPTokenizer::Impl::load_merges_json(const Json& merges, const std::filesystem::path& path) {
    std::string first;
    std::string second;
    for (std::size_t i = 0; i < merges.size(); ++i) {
        const Json& merge = merges[i];
        const std::string where = "model.merges[" + std::to_string(i) + "]";
        bool ok = false;
        if (merge.is_string()) {
            ok = split_merge(merge.get_ref<const std::string&>(), first, second);
        } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
                   merge[1].is_string()) {
            first = merge[0].get<std::string>();
            second = merge[1].get<std::string>();
            ok = true;
        }
        if (!ok) {
            throw FormatError(path.string(),
                              where +
                                  " must be \"a b\" (two tokens separated by one space) or a "
                                  "pair [\"a\", \"b\"], not " +
                                  merge.dump());
        }
        add_merge(first, second, path, where);
    }
}

void CLIPTokenizer::Impl::tokenize(std::string_view text, std::vector<int64_t>& ids) const {
    check_utf8(text);
    // Added tokens matched in the raw text, leftmost-longest; the rest is normalized piecewise.
    std::size_t segment = 0;
    for (std::size_t i = 0; i < text.size();) {
        const AddedToken* match = nullptr;
        for (const AddedToken& token : raw_tokens_) {
            if (text.compare(i, token.content.size(), token.content) == 0 &&
                (match == nullptr || token.content.size() > match->content.size())) {
                match = &token;
            }
        }
        if (match == nullptr) {
            ++i;
            continue;
        }
        if (i > segment)
            normalized_segment(normalize(from_valid_utf8(text.substr(segment, i - segment))), ids);
        ids.push_back(match->id);
        i += match->content.size();
        segment = i;
    }
    if (segment < text.size())
        normalized_segment(normalize(from_valid_utf8(text.substr(segment))), ids);
}

void CLIPTokenizer::Impl::normalized_segment(std::u32string_view text,
                                             std::vector<int64_t>& ids) const {
    std::vector<std::u32string_view> pieces;
    const auto flush = [&](std::u32string_view part) {
        pieces.clear();
        pre_tokenize(part, pieces);
        for (std::u32string_view piece : pieces) add_piece(piece, ids);
    };
    std::size_t segment = 0;
    for (std::size_t i = 0; i < text.size();) {
        const AddedToken* match = nullptr;
        for (const AddedToken& token : normalized_tokens_) {
            if (starts_with(text, i, token.content32) &&
                (match == nullptr || token.content32.size() > match->content32.size())) {
                match = &token;
            }
        }
        if (match == nullptr) {
            ++i;
            continue;
        }
        if (i > segment) flush(text.substr(segment, i - segment));
        ids.push_back(match->id);
        i += match->content32.size();
        segment = i;
    }
    if (segment < text.size()) flush(text.substr(segment));
}

void CLIPTokenizer::Impl::add_piece(std::u32string_view piece, std::vector<int64_t>& ids) const {
    const std::string bytes = to_utf8(piece);
    {
        std::lock_guard<std::mutex> lock(cache_mutex_);
        const auto it = cache_.find(bytes);
        if (it != cache_.end()) {
            ids.insert(ids.end(), it->second.begin(), it->second.end());
            return;
        }
    }
    std::vector<int64_t> result = bpe(bytes);
    ids.insert(ids.end(), result.begin(), result.end());
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < kCacheCapacity) cache_.emplace(bytes, std::move(result));
}

// tokenizers' BPE::merge_word + Word::merge_all: one symbol per byte (the last with "</w>"),
// then the lowest-ranked adjacent pair is merged first, the leftmost one on ties.
std::vector<int64_t> CLIPTokenizer::Impl::bpe(const std::string& piece) const {
    struct Symbol {
        int64_t id;
        std::ptrdiff_t prev;
        std::ptrdiff_t next;
        bool removed;
    };
    struct Candidate {
        std::uint32_t rank;
        std::size_t pos;
        int64_t new_id;
        bool operator<(const Candidate& o) const {  // reversed: std::priority_queue is a max-heap
            return rank != o.rank ? rank > o.rank : pos > o.pos;
        }
    };
    const auto n = static_cast<std::ptrdiff_t>(piece.size());
    std::vector<Symbol> symbols;
    symbols.reserve(piece.size());
    for (std::ptrdiff_t i = 0; i < n; ++i) {
        const auto byte = static_cast<unsigned char>(piece[static_cast<std::size_t>(i)]);
        const int64_t id = i + 1 == n ? byte_last_id_[byte] : byte_id_[byte];
        symbols.push_back({id < 0 ? unk : id, i - 1, i + 1 == n ? -1 : i + 1, false});
    }
    std::priority_queue<Candidate> queue;
    const auto push = [&](std::size_t pos, int64_t left, int64_t right) {
        const auto it = merges_.find(pair_key(left, right));
        if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.new_id});
    };
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i) push(i, symbols[i].id, symbols[i + 1].id);

    while (!queue.empty()) {
        const Candidate top = queue.top();
        queue.pop();
        Symbol& left = symbols[top.pos];
        if (left.removed || left.next < 0) continue;
        const auto next_pos = static_cast<std::size_t>(left.next);
        const Symbol right = symbols[next_pos];
        // A stale entry: the pair at this position changed since it was queued.
        const auto current = merges_.find(pair_key(left.id, right.id));
        if (current == merges_.end() || current->second.new_id != top.new_id) continue;

        left.id = top.new_id;
        left.next = right.next;
        symbols[next_pos].removed = true;
        if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = top.pos;
        if (left.prev >= 0) {
            const auto prev = static_cast<std::size_t>(left.prev);
            push(prev, symbols[prev].id, left.id);
        }
        if (left.next >= 0) push(top.pos, left.id, symbols[static_cast<std::size_t>(left.next)].id);
    }
    std::vector<int64_t> ids;
    for (const Symbol& s : symbols) {
        if (!s.removed) ids.push_back(s.id);
    }
    return ids;
}

// ---------------------------------------------------------------------------------------------

CLIPTokenizer::CLIPTokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

CLIPTokenizer CLIPTokenizer::from_folder(const std::filesystem::path& dir) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
        throw IoError(dir.string(),
                      "is not a folder (expected a diffusers tokenizer/ folder with "
                      "tokenizer.json, or vocab.json and merges.txt)");
    }
    const std::filesystem::path tokenizer_json = dir / "tokenizer.json";
    if (!std::filesystem::exists(tokenizer_json, ec)) {
        if (!std::filesystem::exists(dir / "vocab.json", ec) &&
            !std::filesystem::exists(dir / "merges.txt", ec)) {
            throw IoError(dir.string(),
                          "has neither tokenizer.json nor vocab.json and merges.txt (expected a "
                          "diffusers tokenizer/ folder)");
        }
        const SpecialTokens special = read_special_tokens(dir);
        const std::filesystem::path vocab_json = dir / "vocab.json";
        auto impl = std::make_shared<Impl>(parse_vocab(parse_json_file(vocab_json), vocab_json, ""),
                                           vocab_json, "vocab.json");
        impl->load_merges_txt(dir / "merges.txt");
        impl->set_special_tokens(special, dir.string());
        return CLIPTokenizer(std::move(impl));
    }

    // transformers 5.23 takes the vocabulary and merges from tokenizer.json whenever it exists
    // (TokenizersBackend.convert_to_native_format), ignoring vocab.json and merges.txt.
    const Json root = parse_json_file(tokenizer_json);
    const Json& model = tokenizer_json_model(root, tokenizer_json);
    auto impl = std::make_shared<Impl>(parse_vocab(model["vocab"], tokenizer_json, "model.vocab"),
                                       tokenizer_json, "model.vocab");
    impl->load_merges_json(model["merges"], tokenizer_json);
    const auto json_added = [&] {
        std::vector<TokenSpec> added;
        for (auto& [id, spec] : parse_added_tokens(root, tokenizer_json)) {
            const auto it = impl->vocab.find(spec.content);
            if (it != impl->vocab.end() && it->second != id) {
                throw FormatError(tokenizer_json.string(),
                                  "the added token \"" + spec.content + "\" has id " +
                                      std::to_string(id) + " but id " + std::to_string(it->second) +
                                      " in model.vocab");
            }
            added.push_back(std::move(spec));
        }
        return added;
    };
    impl->set_special_tokens(read_special_tokens(dir, json_added), dir.string());
    return CLIPTokenizer(std::move(impl));
}

CLIPTokenizer CLIPTokenizer::from_files(const std::filesystem::path& vocab_json,
                                        const std::filesystem::path& merges_txt,
                                        std::string pad_token, int max_length) {
    SpecialTokens special;
    special.pad.content = std::move(pad_token);
    special.max_length = max_length;
    auto impl = std::make_shared<Impl>(parse_vocab(parse_json_file(vocab_json), vocab_json, ""),
                                       vocab_json, "vocab.json");
    impl->load_merges_txt(merges_txt);
    impl->set_special_tokens(special, "from_files()");
    return CLIPTokenizer(std::move(impl));
}

std::vector<int64_t> CLIPTokenizer::tokenize(std::string_view text) const {
    std::vector<int64_t> ids;
    impl_->tokenize(text, ids);
    return ids;
}

std::vector<int64_t> CLIPTokenizer::encode(std::string_view text) const {
    std::vector<int64_t> ids;
    ids.reserve(static_cast<std::size_t>(impl_->max_length));
    ids.push_back(impl_->bos);
    impl_->tokenize(text, ids);
    const auto body = static_cast<std::size_t>(impl_->max_length - 1);
    if (ids.size() > body) ids.resize(body);
    ids.push_back(impl_->eos);
    ids.resize(static_cast<std::size_t>(impl_->max_length), impl_->pad);
    return ids;
}

int64_t CLIPTokenizer::bos_id() const {
    return impl_->bos;
}
int64_t CLIPTokenizer::eos_id() const {
    return impl_->eos;
}
int64_t CLIPTokenizer::pad_id() const {
    return impl_->pad;
}
int64_t CLIPTokenizer::unk_id() const {
    return impl_->unk;
}
int CLIPTokenizer::max_length() const {
    return impl_->max_length;
}
std::size_t CLIPTokenizer::vocab_size() const {
    return impl_->vocab.size();
}

}  // namespace loom
