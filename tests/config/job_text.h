#pragma once

// A minimal valid job for config tests, and helpers to load variants of it.

#include <map>
#include <optional>
#include <string>

#include "loom/config/load.h"
#include "loom/core/error.h"

namespace loom::config::testing {

// Line numbers matter to the tests: keys below sit on the lines given in the comments.
inline const char* kMinimalJob =
    "job: extension\n"                      // 1
    "config:\n"                             // 2
    "  name: test\n"                        // 3
    "  process:\n"                          // 4
    "    - type: sd_trainer\n"              // 5
    "      training_folder: out\n"          // 6
    "      device: sim\n"                   // 7
    "      datasets:\n"                     // 8
    "        - folder_path: data\n"         // 9
    "      model:\n"                        // 10
    "        name_or_path: models/tiny\n";  // 11

// kMinimalJob with `extra` appended (keys continue at line 12).
inline std::string minimal_job_with(const std::string& extra) {
    return std::string(kMinimalJob) + extra;
}

// Loads `text` as "job.yaml" with an empty environment unless `env` says otherwise.
inline LoadedJob load(const std::string& text, LoadOptions options = {},
                      std::map<std::string, std::string> env = {}) {
    if (!options.env) {
        options.env = [env](const std::string& name) -> std::optional<std::string> {
            auto it = env.find(name);
            if (it == env.end()) return std::nullopt;
            return it->second;
        };
    }
    return load_job_text(text, "job.yaml", options);
}

// The message of the ConfigError that loading `text` throws, or "" when it loads.
inline std::string error_of(const std::string& text, LoadOptions options = {},
                            std::map<std::string, std::string> env = {}) {
    try {
        load(text, std::move(options), std::move(env));
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "";
}

}  // namespace loom::config::testing
