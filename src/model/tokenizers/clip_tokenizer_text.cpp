#include "clip_tokenizer_text.h"

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "loom/core/error.h"
#include "loom/core/utf8.h"
#include "loom/model/tokenizers/unicode_tables.h"

namespace loom::clip_tokenizer_detail {

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

void check_utf8(std::string_view text, const char* tokenizer) {
    if (const auto bad = find_invalid_utf8(text)) {
        std::ostringstream msg;
        msg << tokenizer << ": the text is not valid UTF-8 (line " << bad->line << ", column "
            << bad->column << ", byte offset " << bad->offset
            << "); re-save the caption or prompt as UTF-8";
        throw Error(msg.str());
    }
}

// ---------------------------------------------------------------------------------------------
// Normalization

namespace {

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

}  // namespace

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

// The alternatives are tried in the regex's order at each position.
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

}  // namespace loom::clip_tokenizer_detail
