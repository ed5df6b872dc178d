#pragma once

// Deterministic randomness for data order and caption augmentation. std::mt19937_64's output is
// fixed by the standard, but std::shuffle and the std distributions are not (they differ between
// standard libraries), so loom draws through these helpers: the same seed gives the same batches
// and captions on every platform and after a resume.

#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace loom::data {

using Rng = std::mt19937_64;

// SplitMix64's finaliser: mixes a seed with stream numbers (epoch, batch, slot) into an
// independent-looking seed.
inline std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t a, std::uint64_t b = 0) {
    auto mix = [](std::uint64_t z) {
        z += 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    };
    return mix(mix(mix(seed) ^ a) ^ b);
}

// Uniform in [0, 1) with 53 random bits.
inline double uniform01(Rng& rng) {
    return double(rng() >> 11) * (1.0 / 9007199254740992.0);
}

// Uniform in [0, n) without modulo bias (n > 0).
inline std::uint64_t uniform_below(Rng& rng, std::uint64_t n) {
    const std::uint64_t limit = ~std::uint64_t(0) - (~std::uint64_t(0) % n);
    std::uint64_t r = rng();
    while (r >= limit) r = rng();
    return r % n;
}

// Fisher-Yates over [first, v.size()).
template <class T>
void shuffle(std::vector<T>& v, Rng& rng, std::size_t first = 0) {
    for (std::size_t i = v.size(); i > first + 1; --i) {
        const std::size_t j = first + std::size_t(uniform_below(rng, i - first));
        std::swap(v[i - 1], v[j]);
    }
}

}  // namespace loom::data
