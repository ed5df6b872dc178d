#pragma once

// SentencePiece's precompiled normalization rules (the "precompiled_charsmap" of a spiece.model,
// carried base64-encoded in tokenizer.json's "Precompiled" normalizer), applied exactly as Hugging
// Face tokenizers' Precompiled normalizer applies them:
//  - the blob is a little-endian u32 trie size in bytes, a Darts-clone double-array trie of that
//    many bytes mapping UTF-8 keys to offsets, then the NUL-terminated replacement strings;
//  - the text is walked grapheme cluster by grapheme cluster; a cluster shorter than 6 bytes is
//    replaced whole by the value of the *shortest* trie key that prefixes it, if any; otherwise
//    each of its code points is replaced by its own value or kept. (So a fullwidth 'Ｋ' followed
//    by a combining accent becomes a plain 'K' and the accent is gone: the reference does this,
//    and token ids depend on it.)
// Internal to the model layer.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

class PrecompiledCharsmap {
  public:
    // `blob` is the decoded charsmap; `where` names it in errors ("FILE: normalizer...").
    // Throws FormatError(where) when the blob is truncated or its trie points outside itself.
    PrecompiledCharsmap(std::string_view blob, const std::string& where);

    // `text` must be valid UTF-8.
    std::string normalize(std::string_view text) const;

  private:
    // The replacement for the shortest key that prefixes `chunk`, or nullptr.
    const char* transform(std::string_view chunk) const;

    std::vector<std::uint32_t> trie_;
    std::string normalized_;
};

// Decodes standard base64 (with or without padding). Throws FormatError(where) on bad input.
std::string decode_base64(std::string_view text, const std::string& where);

}  // namespace loom
