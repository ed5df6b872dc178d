#pragma once

// Loading a job file: read and validate YAML with file:line:col positions, substitute ${ENV}
// and [name], apply --set overrides, read typed structs, fill dependent defaults, validate.

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/config/diagnostic.h"
#include "loom/config/job.h"

namespace loom::config {

// Files above this size are refused before parsing (a job file is a few KiB).
inline constexpr std::size_t kMaxJobFileBytes = 4u * 1024u * 1024u;

struct LoadOptions {
    // "PATH=VALUE" overrides, applied in order after substitution. PATH uses dots between keys
    // and list indices as numbers: "config.process.0.train.lr=1e-4". VALUE is YAML ("[512, 768]").
    std::vector<std::string> overrides;
    // Turns every warning into a ConfigError.
    bool strict = false;
    // Environment lookup for ${VAR}; defaults to std::getenv. Tests inject their own.
    std::function<std::optional<std::string>(const std::string&)> env;
};

struct LoadedJob {
    Job job;
    std::vector<Diagnostic> warnings;
    std::vector<std::string> applied_overrides;  // "config.process.0.train.lr: 1e-06 -> 1e-4"
};

// Throws loom::ConfigError (bad content, with position) or loom::IoError (unreadable file).
LoadedJob load_job_file(const std::filesystem::path& path, const LoadOptions& options = {});

// The same from text; `source_name` stands for the file name in messages.
LoadedJob load_job_text(std::string_view text, const std::string& source_name,
                        const LoadOptions& options = {});

}  // namespace loom::config
