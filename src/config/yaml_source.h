#pragma once

// The parsed YAML of one job file and where each of its values came from (a file position, or
// a --set override). Internal to the config layer.

#include <yaml-cpp/yaml.h>

#include <map>
#include <string>
#include <string_view>

namespace loom::config::detail {

class YamlSource {
  public:
    // Validates the raw text (size, UTF-8, content) and parses it. Throws ConfigError with the
    // position of the first problem.
    YamlSource(std::string_view text, std::string name);

    const std::string& name() const { return name_; }
    YAML::Node& root() { return root_; }
    const YAML::Node& root() const { return root_; }

    // Marks `path` (and everything below it) as set by a --set override, shown as `label`.
    void mark_overridden(const std::string& path, std::string label);

    // "file:line:col" of `node`, or the override label when `path` was set by --set.
    std::string where(const YAML::Node& node, const std::string& path) const;

  private:
    std::string name_;
    YAML::Node root_;
    std::map<std::string, std::string> overrides_;  // path -> "--set PATH=VALUE"
};

// Throws ConfigError when a job file of `bytes` bytes is too large to be one.
void check_job_file_size(std::size_t bytes, const std::string& name);

// "file:line:col" for a yaml-cpp mark (0-based) in file `name`.
std::string format_position(const std::string& name, const YAML::Mark& mark);

// "'text'", "a list", "a mapping" or "nothing (null)", for messages about a value.
std::string describe(const YAML::Node& node);

// "a.b" joined by dots, with empty parts skipped.
std::string join_path(const std::string& parent, const std::string& key);

}  // namespace loom::config::detail
