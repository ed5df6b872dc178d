#pragma once

// Helpers shared by the io tests: building safetensors images byte by byte, and the byte pattern
// the interop test and tests/io/safetensors_interop.py agree on.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "loom/io/safetensors.h"
#include "temp_dir.h"

namespace loom::test {

// The 8-byte little-endian header length.
inline std::string le64(std::uint64_t n) {
    std::string out;
    for (int i = 0; i < 8; ++i) out += static_cast<char>((n >> (8 * i)) & 0xFF);
    return out;
}

// A file image: N = header.size(), then the header, then the data buffer.
inline std::string image(std::string_view header, std::string_view data = {}) {
    return le64(header.size()) + std::string(header) + std::string(data);
}

// Byte `j` of interop tensor number `k` (safetensors_interop.py computes the same). BOOL bytes are
// 0 or 1 so that every framework accepts them.
inline std::string pattern_bytes(std::size_t k, std::size_t nbytes, DType dtype) {
    std::string out(nbytes, '\0');
    for (std::size_t j = 0; j < nbytes; ++j) {
        const std::size_t v = dtype == DType::kBool ? (j + k) % 2 : (j * 31 + k * 17 + 7) % 256;
        out[j] = static_cast<char>(v);
    }
    return out;
}

std::string read_file(const std::filesystem::path& path);
// Names of the entries of a folder, sorted.
std::vector<std::string> list_folder(const std::filesystem::path& path);

}  // namespace loom::test
