#pragma once

// ai-toolkit's text substitutions, applied to every scalar value of the parsed document:
// ${VAR} from the environment (an unset variable is an error) and then [name] with config.name.

#include <functional>
#include <optional>
#include <string>

#include "yaml_source.h"

namespace loom::config::detail {

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

void substitute_environment(YamlSource& source, const EnvLookup& env);
void substitute_name(YamlSource& source);

}  // namespace loom::config::detail
