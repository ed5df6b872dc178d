#pragma once

// UTF-8 validation for text inputs (job files, captions): invalid bytes are reported with their
// line and column instead of surfacing later as garbled tokens.

#include <cstddef>
#include <optional>
#include <string_view>

namespace loom {

struct TextPosition {
    std::size_t line = 1;    // 1-based
    std::size_t column = 1;  // 1-based, counted in code points
    std::size_t offset = 0;  // byte offset of the first invalid byte
};

// Returns the position of the first byte that is not part of a valid UTF-8 sequence (overlong
// forms, surrogates and code points above U+10FFFF are invalid), or nullopt when all is valid.
std::optional<TextPosition> find_invalid_utf8(std::string_view text);

}  // namespace loom
