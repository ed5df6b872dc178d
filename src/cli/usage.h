#pragma once

#include <string>

namespace loom::cli {

// The text of `loom --help` / `loom help`: usage, commands, exit codes.
std::string general_usage();

// "loom 0.1.0 (LibTorch 2.15.0, CUDA build 13.2)".
std::string version_line();

}  // namespace loom::cli
