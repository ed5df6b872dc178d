#include "safetensors_format.h"

#include <algorithm>

#include "loom/core/utf8.h"

namespace loom::safetensors_detail {

std::string quote_text(std::string_view text) {
    constexpr std::size_t kMaxShown = 200;
    const bool utf8 = !find_invalid_utf8(text).has_value();
    std::size_t shown = std::min(text.size(), kMaxShown);
    // Cut long text on a character boundary.
    while (utf8 && shown < text.size() && shown > 0 && (text[shown] & 0xC0) == 0x80) --shown;
    std::string out = "'";
    for (std::size_t i = 0; i < shown; ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c < 0x20 || c == 0x7F || (c >= 0x80 && !utf8)) {
            static const char kHex[] = "0123456789abcdef";
            out += "\\x";
            out += kHex[c >> 4];
            out += kHex[c & 0xF];
        } else {
            out += static_cast<char>(c);
        }
    }
    if (shown < text.size()) out += "...";
    return out + "'";
}

std::string tensor_label(std::string_view name) {
    return "tensor " + quote_text(name);
}

std::string bytes_text(std::uint64_t n) {
    return std::to_string(n) + (n == 1 ? " byte" : " bytes");
}

std::string offsets_text(std::uint64_t begin, std::uint64_t end) {
    return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

std::string dtype_shape_text(DType dtype, const std::vector<std::int64_t>& shape) {
    return std::string(dtype_name(dtype)) + " shape " + join_numbers(shape);
}

std::uint64_t read_le64(const std::uint8_t* p) {
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

void append_le64(std::string& out, std::uint64_t v) {
    for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}

}  // namespace loom::safetensors_detail
