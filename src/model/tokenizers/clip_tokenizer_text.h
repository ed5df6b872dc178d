#pragma once

// The text steps of the CLIP tokenizer before BPE (clip_tokenizer.h, steps 2 and 3): UTF-8
// decoding and encoding, normalization and pre-tokenization. Pure functions over the constant
// tables of unicode_tables.h: thread-safe. Internal to the model layer.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace loom::clip_tokenizer_detail {

void append_utf8(char32_t c, std::string& out);
std::string to_utf8(std::u32string_view text);
// Decodes text that find_invalid_utf8() has accepted.
std::u32string from_valid_utf8(std::string_view text);
// Throws loom::Error naming `tokenizer` and the line, column and byte offset of the first invalid
// byte.
void check_utf8(std::string_view text, const char* tokenizer = "CLIP tokenizer");

// NFC as the reference's normalizers.NFC() (the tables of unicode_tables.h).
std::u32string nfc(std::u32string_view text);

// NFC, whitespace runs to one space, lower-casing (the reference's
// normalizers.Sequence([NFC(), Replace(Regex(r"\s+"), " "), Lowercase()])).
std::u32string normalize(std::u32string_view text);

bool starts_with(std::u32string_view text, std::size_t pos, std::u32string_view prefix);

// Splits normalized text the way CLIP's Split regex (matches kept, the rest dropped) followed by
// ByteLevel's GPT-2 regex does, appending views into `text` to `pieces`.
void pre_tokenize(std::u32string_view text, std::vector<std::u32string_view>& pieces);

}  // namespace loom::clip_tokenizer_detail
