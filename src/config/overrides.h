#pragma once

// --set PATH=VALUE overrides on the parsed document: dots between keys, list items by index
// (config.process.0.train.lr=1e-4). VALUE is parsed as YAML, so lists and maps work too.

#include <string>
#include <vector>

#include "yaml_source.h"

namespace loom::config::detail {

// Applies every override in order; returns one log line per override
// ("config.process.0.train.lr: 1e-06 -> 1e-4"). Throws ConfigError naming the override.
std::vector<std::string> apply_overrides(YamlSource& source,
                                         const std::vector<std::string>& overrides);

}  // namespace loom::config::detail
