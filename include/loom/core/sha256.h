#pragma once

// SHA-256 (FIPS 180-4), used for the content part of cache keys: a changed image or caption
// gets a different key, with no realistic chance of two different files colliding.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace loom {

// Incremental form, for files read in pieces. Not thread-safe per instance.
class Sha256 {
  public:
    Sha256();
    void update(std::string_view bytes);
    // The digest; the object must not be updated afterwards.
    std::array<std::uint8_t, 32> finish();
    // The digest as 64 lowercase hex digits; likewise the last call on the object.
    std::string finish_hex();

  private:
    void block(const std::uint8_t* p);

    std::array<std::uint32_t, 8> h_;
    std::array<std::uint8_t, 64> buffer_{};
    std::size_t buffered_ = 0;
    std::uint64_t length_ = 0;  // bytes
};

// 64 lowercase hex digits.
std::string sha256_hex(std::string_view bytes);

}  // namespace loom
