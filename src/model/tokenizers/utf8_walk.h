#pragma once

// Walking UTF-8 that has been validated (find_invalid_utf8): a code point's byte length from its
// lead byte, and the code point at a position. Internal to the model layer's tokenizers.

#include <cstddef>
#include <string_view>

namespace loom::utf8_walk {

inline std::size_t length(unsigned char lead) {
    if (lead < 0x80) return 1;
    if ((lead >> 5) == 0x6) return 2;
    if ((lead >> 4) == 0xE) return 3;
    return 4;
}

inline std::size_t length_at(std::string_view text, std::size_t pos) {
    return length(static_cast<unsigned char>(text[pos]));
}

// The code point of the `length` bytes at `pos`.
inline char32_t decode(std::string_view text, std::size_t pos, std::size_t length) {
    const auto byte = [&](std::size_t i) {
        return static_cast<char32_t>(static_cast<unsigned char>(text[pos + i]));
    };
    switch (length) {
        case 1: return byte(0);
        case 2: return ((byte(0) & 0x1Fu) << 6) | (byte(1) & 0x3Fu);
        case 3: return ((byte(0) & 0x0Fu) << 12) | ((byte(1) & 0x3Fu) << 6) | (byte(2) & 0x3Fu);
        default:
            return ((byte(0) & 0x07u) << 18) | ((byte(1) & 0x3Fu) << 12) |
                   ((byte(2) & 0x3Fu) << 6) | (byte(3) & 0x3Fu);
    }
}

}  // namespace loom::utf8_walk
