#pragma once

// What the safetensors reader (safetensors_reader.cpp, safetensors_header.cpp) and writer
// (safetensors_writer.cpp) share: dtype names and sizes, the 8-byte little-endian header length,
// and how names and numbers appear in FormatError messages. Internal to the io layer.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/io/safetensors.h"

namespace loom::safetensors_detail {

inline constexpr std::string_view kMetadataKey = "__metadata__";

// ---------------------------------------------------------------------------------------------
// DTypes (safetensors_dtype.cpp)

// Every header name, comma-separated, in enum order.
std::string all_dtype_names();

// Bits held by `shape` elements of `dtype`, or nullopt when the count overflows 64 bits.
// ref: safetensors/src/tensor.rs Metadata::validate (checked_mul over the shape, then bitsize)
std::optional<std::uint64_t> total_bits(DType dtype, const std::vector<std::int64_t>& shape);

// ---------------------------------------------------------------------------------------------
// Message text and byte order (safetensors_format.cpp)

// Names and keys in messages: quoted, with control characters (and, in text that is not UTF-8,
// every non-ASCII byte) shown as \xNN so that messages stay printable UTF-8.
std::string quote_text(std::string_view text);
// "tensor 'name'".
std::string tensor_label(std::string_view name);

template <typename Int>
std::string join_numbers(const std::vector<Int>& values) {
    std::string out = "[";
    for (std::size_t i = 0; i < values.size(); ++i) {
        if (i > 0) out += ", ";
        out += std::to_string(values[i]);
    }
    return out + "]";
}

// "[1, 2]", "1 byte", "[0, 16]", "F32 shape [2, 2]".
std::string bytes_text(std::uint64_t n);
std::string offsets_text(std::uint64_t begin, std::uint64_t end);
std::string dtype_shape_text(DType dtype, const std::vector<std::int64_t>& shape);

// The 8-byte header length N is little-endian.
std::uint64_t read_le64(const std::uint8_t* p);
void append_le64(std::string& out, std::uint64_t v);

}  // namespace loom::safetensors_detail
