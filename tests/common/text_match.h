#pragma once

// Substring checks for tests that read logs and messages.

#include <string>

namespace loom::testing {

inline bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

}  // namespace loom::testing
