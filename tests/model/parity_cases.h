#pragma once

// The reference cases tests/parity/make_reference.py writes, as the parity tests read them:
// the folder ($LOOM_PARITY_DIR), one case file's tensors by name, and the error measure.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "loom/model/loading/tensor_file.h"

namespace loom::testing {

inline std::filesystem::path parity_dir() {
    const char* dir = std::getenv("LOOM_PARITY_DIR");
    EXPECT_NE(dir, nullptr) << "LOOM_PARITY_DIR must point at make_reference.py's output";
    return dir ? std::filesystem::path(dir) : std::filesystem::path();
}

// The tensors of cases/`file` by name.
inline std::map<std::string, at::Tensor> read_case(const std::string& file) {
    std::map<std::string, at::Tensor> out;
    for (auto& [name, t] : read_all_tensors(parity_dir() / "cases" / file)) out[name] = t;
    return out;
}

// The largest absolute difference, in float64 (shapes must agree).
inline double max_error(const at::Tensor& a, const at::Tensor& b) {
    EXPECT_EQ(a.sizes(), b.sizes());
    return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

}  // namespace loom::testing
