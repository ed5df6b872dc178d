#include "precompiled_charsmap.h"

#include <array>
#include <cstring>

#include "grapheme_tables.h"
#include "loom/core/error.h"
#include "utf8_walk.h"

namespace loom {

namespace {

// Darts-clone's unit layout: label in the low byte (bit 31 set for non-label units), has_leaf in
// bit 8, the offset to the children in bits 10..31 (shifted left by 8 when bit 9 is set), and a
// leaf's value in bits 0..30.
std::uint32_t unit_offset(std::uint32_t unit) {
    return (unit >> 10) << ((unit & (1u << 9)) >> 6);
}
std::uint32_t unit_label(std::uint32_t unit) {
    return unit & ((1u << 31) | 0xFFu);
}
bool unit_has_leaf(std::uint32_t unit) {
    return ((unit >> 8) & 1u) != 0;
}
std::uint32_t unit_value(std::uint32_t unit) {
    return unit & ((1u << 31) - 1);
}

// The byte length of the grapheme cluster starting at `pos`. Only clusters shorter than 6 bytes
// are treated differently from their code points, so the rules that only ever build longer
// clusters (Hangul syllable sequences, regional-indicator pairs, emoji ZWJ sequences) are left
// out; see scripts/gen_grapheme_tables.py.
std::size_t cluster_length(std::string_view text, std::size_t pos) {
    using unicode::GraphemeClass;
    std::size_t end = pos + utf8_walk::length_at(text, pos);
    const char32_t first = utf8_walk::decode(text, pos, end - pos);
    auto next = [&](std::size_t at, std::size_t* length) {
        *length = utf8_walk::length_at(text, at);
        return utf8_walk::decode(text, at, *length);
    };
    std::size_t length = 0;
    if (first == U'\r') {
        if (end < text.size() && text[end] == '\n') ++end;
        return end - pos;
    }
    GraphemeClass cls = unicode::grapheme_class(first);
    if (cls == GraphemeClass::control) return end - pos;
    // Prepend x (anything but a control), then any number of joiners.
    while (cls == GraphemeClass::prepend && end < text.size()) {
        const char32_t c = next(end, &length);
        cls = unicode::grapheme_class(c);
        if (cls == GraphemeClass::control || c == U'\r' || c == U'\n') return end - pos;
        end += length;
    }
    while (end < text.size()) {
        const char32_t c = next(end, &length);
        if (unicode::grapheme_class(c) != GraphemeClass::joins) break;
        end += length;
    }
    return end - pos;
}

}  // namespace

std::string decode_base64(std::string_view text, const std::string& where) {
    std::array<int, 256> value;
    value.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) value[static_cast<unsigned char>(alphabet[i])] = i;
    std::string out;
    out.reserve(text.size() / 4 * 3);
    std::uint32_t bits = 0;
    int count = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char ch = text[i];
        if (ch == '=') break;
        const int v = value[static_cast<unsigned char>(ch)];
        if (v < 0) {
            throw FormatError(where, "is not base64 (character " + std::to_string(i) + ")");
        }
        bits = (bits << 6) | static_cast<std::uint32_t>(v);
        if (++count == 4) {
            out.push_back(static_cast<char>((bits >> 16) & 0xFF));
            out.push_back(static_cast<char>((bits >> 8) & 0xFF));
            out.push_back(static_cast<char>(bits & 0xFF));
            bits = 0;
            count = 0;
        }
    }
    if (count == 1) throw FormatError(where, "is not base64 (truncated)");
    if (count == 2) out.push_back(static_cast<char>((bits >> 4) & 0xFF));
    if (count == 3) {
        out.push_back(static_cast<char>((bits >> 10) & 0xFF));
        out.push_back(static_cast<char>((bits >> 2) & 0xFF));
    }
    return out;
}

PrecompiledCharsmap::PrecompiledCharsmap(std::string_view blob, const std::string& where) {
    if (blob.size() < 4) throw FormatError(where, "precompiled_charsmap is truncated");
    std::uint32_t trie_bytes = 0;
    for (int i = 3; i >= 0; --i) {
        trie_bytes =
            (trie_bytes << 8) | static_cast<unsigned char>(blob[static_cast<std::size_t>(i)]);
    }
    if (trie_bytes % 4 != 0 || trie_bytes > blob.size() - 4 || trie_bytes == 0) {
        throw FormatError(where, "precompiled_charsmap's trie size " + std::to_string(trie_bytes) +
                                     " does not fit its " + std::to_string(blob.size()) + " bytes");
    }
    trie_.resize(trie_bytes / 4);
    for (std::size_t i = 0; i < trie_.size(); ++i) {
        std::uint32_t unit = 0;
        for (int b = 3; b >= 0; --b) {
            unit = (unit << 8) |
                   static_cast<unsigned char>(blob[4 + i * 4 + static_cast<std::size_t>(b)]);
        }
        trie_[i] = unit;
    }
    // transform() checks every index against the trie and the strings, so a corrupt blob gives
    // wrong text at worst, never a read outside them.
    normalized_ = std::string(blob.substr(4 + trie_bytes));
}

const char* PrecompiledCharsmap::transform(std::string_view chunk) const {
    std::size_t node = unit_offset(trie_[0]);
    for (const char ch : chunk) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == 0) return nullptr;
        node ^= c;
        if (node >= trie_.size()) return nullptr;
        const std::uint32_t unit = trie_[node];
        if (unit_label(unit) != c) return nullptr;
        node ^= unit_offset(unit);
        if (node >= trie_.size()) return nullptr;
        if (unit_has_leaf(unit)) {
            const std::uint32_t value = unit_value(trie_[node]);
            return value < normalized_.size() ? normalized_.c_str() + value : nullptr;
        }
    }
    return nullptr;
}

std::string PrecompiledCharsmap::normalize(std::string_view text) const {
    std::string out;
    out.reserve(text.size());
    std::size_t pos = 0;
    while (pos < text.size()) {
        const std::size_t cluster = cluster_length(text, pos);
        const std::string_view grapheme = text.substr(pos, cluster);
        pos += cluster;
        if (grapheme.size() < 6) {
            if (const char* norm = transform(grapheme)) {
                out += norm;
                continue;
            }
        }
        for (std::size_t at = 0; at < grapheme.size();) {
            const std::size_t length = utf8_walk::length_at(grapheme, at);
            const std::string_view part = grapheme.substr(at, length);
            if (const char* norm = transform(part)) {
                out += norm;
            } else {
                out += part;
            }
            at += length;
        }
    }
    return out;
}

}  // namespace loom
