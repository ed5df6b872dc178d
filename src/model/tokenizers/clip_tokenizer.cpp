#include "loom/model/tokenizers/clip_tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <utility>

#include "clip_tokenizer_files.h"
#include "clip_tokenizer_impl.h"
#include "clip_tokenizer_text.h"
#include "loom/core/error.h"

// The tokenizer's pipeline is spread over files named for its steps: clip_tokenizer_text.cpp
// (UTF-8, normalization, pre-tokenization), byte_level_bpe.cpp (merges, BPE, cache) and
// clip_tokenizer_files.cpp (the folder's files). This one splits text around the added tokens
// and holds the public API.

namespace loom {

using namespace clip_tokenizer_detail;

CLIPTokenizer::Impl::Impl(std::unordered_map<std::string, int64_t> vocabulary,
                          std::filesystem::path vocab_path, std::string vocab_name)
    : bpe_(std::move(vocabulary), std::move(vocab_path), std::move(vocab_name),
           std::string(kEndOfWord)) {}

void CLIPTokenizer::Impl::add_piece(std::u32string_view piece, std::vector<int64_t>& ids) const {
    bpe_.encode(to_utf8(piece), unk, ids);
}

void CLIPTokenizer::Impl::set_special_tokens(const SpecialTokens& special,
                                             const std::string& source) {
    const auto id_of = [&](const std::string& token, const std::string& role) {
        const auto it = vocab().find(token);
        if (it == vocab().end()) {
            throw FormatError(bpe_.vocab_path().string(), "the " + role + " \"" + token +
                                                              "\" (from " + source +
                                                              ") is not in the vocabulary");
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
            const auto it = impl->vocab().find(spec.content);
            if (it != impl->vocab().end() && it->second != id) {
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
    return impl_->vocab().size();
}

}  // namespace loom
