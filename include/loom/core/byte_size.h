#pragma once

// Byte sizes as users write them: "96MiB", "8GiB", "1.5GB", "100000000".

#include <cstdint>
#include <string>
#include <string_view>

namespace loom {

inline constexpr std::uint64_t kKiB = 1024ULL;
inline constexpr std::uint64_t kMiB = kKiB * 1024ULL;
inline constexpr std::uint64_t kGiB = kMiB * 1024ULL;
inline constexpr std::uint64_t kTiB = kGiB * 1024ULL;

// Parses a size. Binary units (KiB, MiB, GiB, TiB) are powers of 1024, decimal units (kB/KB, MB,
// GB, TB) powers of 1000, "B" or no unit means bytes; units are case-insensitive and may be
// separated from the number by spaces. Fractions must resolve to a whole number of bytes after
// rounding down. Throws loom::Error naming the text and the accepted forms.
std::uint64_t parse_byte_size(std::string_view text);

// Formats a size so that parse_byte_size() gives it back exactly: the largest binary unit that
// divides it ("8GiB", "96MiB"), else plain bytes ("100000000").
std::string format_byte_size(std::uint64_t bytes);

// Human-readable size with two decimals, as CUDA's OOM messages print them ("16.00 MiB").
std::string format_bytes_human(std::uint64_t bytes);

}  // namespace loom
