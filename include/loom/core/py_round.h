#pragma once

// Python's round() of a float: to the nearest integer, halves to even — what the reference
// pipelines' size arithmetic uses (std::nearbyint under the default rounding mode).

#include <cmath>
#include <cstdint>

namespace loom {

inline std::int64_t py_round(double v) {
    return static_cast<std::int64_t>(std::nearbyint(v));
}

}  // namespace loom
