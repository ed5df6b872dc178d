#pragma once

// Malformed safetensors files with the exact error each must produce. Shared by the unit test
// (test_safetensors_malformed.cpp) and the parity test, which checks that the reference reader
// (Python safetensors) rejects the same files, except where loom is deliberately stricter.

#include <ostream>
#include <string>
#include <vector>

namespace loom::test {

struct MalformedCase {
    std::string name;   // test name: letters and digits
    std::string bytes;  // the whole file
    // FormatError::what() when parsed under the name "model.safetensors".
    std::string message;
    // True where loom is stricter than the reference on purpose (include/loom/io/safetensors.h):
    // the reference reads this file.
    bool reference_accepts = false;
};

std::vector<MalformedCase> malformed_cases();

// GoogleTest prints the case by name rather than as a byte dump.
inline void PrintTo(const MalformedCase& c, std::ostream* os) {
    *os << c.name;
}

}  // namespace loom::test
