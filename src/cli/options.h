#pragma once

// cxxopts glue shared by the commands: parse with errors turned into loom::UsageError, and the
// options every job-taking command accepts.

// Repeated options such as --set carry YAML values with commas ("[512, 768]"): never split them.
// Every file includes cxxopts through this header so the setting is the same everywhere.
#define CXXOPTS_VECTOR_DELIMITER '\0'
#include <cxxopts.hpp>

#include <string>
#include <vector>

#include "command.h"

namespace loom::cli {

// Parses `args` for the command `name`; a cxxopts error becomes a UsageError that names the
// command and points to its help.
cxxopts::ParseResult parse_options(cxxopts::Options& options, const std::string& name,
                                   const std::vector<std::string>& args);

// --set PATH=VALUE (repeatable) and --strict.
void add_job_options(cxxopts::Options& options);

}  // namespace loom::cli
