#include "overrides.h"

#include <cctype>
#include <sstream>

#include "loom/core/error.h"

namespace loom::config::detail {

namespace {

std::vector<std::string> split_path(const std::string& path) {
    std::vector<std::string> parts;
    std::string part;
    std::istringstream in(path);
    while (std::getline(in, part, '.')) parts.push_back(part);
    if (!path.empty() && path.back() == '.') parts.emplace_back();
    return parts;
}

bool is_index(const std::string& s) {
    if (s.empty() || s.size() > 9) return false;
    for (char c : s) {
        if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    }
    return true;
}

std::string short_yaml(const YAML::Node& node) {
    if (!node.IsDefined() || node.IsNull()) return "null";
    if (node.IsScalar()) return node.Scalar();
    YAML::Emitter out;
    out << YAML::Flow << node;
    return out.c_str();
}

}  // namespace

std::vector<std::string> apply_overrides(YamlSource& source,
                                         const std::vector<std::string>& overrides) {
    std::vector<std::string> log;
    for (const std::string& text : overrides) {
        const std::string label = "--set " + text;
        const std::size_t eq = text.find('=');
        if (eq == std::string::npos || eq == 0) {
            throw ConfigError(label, "",
                              "expected PATH=VALUE, e.g. --set config.process.0.train.lr=1e-4");
        }
        const std::string path = text.substr(0, eq);
        const std::string value_text = text.substr(eq + 1);
        const std::vector<std::string> parts = split_path(path);
        for (const std::string& p : parts) {
            if (p.empty()) {
                throw ConfigError(label, path,
                                  "the path '" + path +
                                      "' has an empty part; write keys "
                                      "separated by single dots");
            }
        }

        YAML::Node value;
        try {
            value = YAML::Load(value_text);
        } catch (const YAML::Exception& e) {
            throw ConfigError(label, path, "the value is not valid YAML: " + e.msg);
        }

        // Walk to the parent of the last part, creating mappings where keys are missing.
        YAML::Node node = source.root();
        std::string walked;
        for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
            const std::string& part = parts[i];
            walked = join_path(walked, part);
            YAML::Node next;
            if (node.IsSequence()) {
                if (!is_index(part) || std::stoul(part) >= node.size()) {
                    throw ConfigError(label, path,
                                      walked + ": " + part +
                                          " is not an index of this list (it has " +
                                          std::to_string(node.size()) + " items, numbered from 0)");
                }
                next = node[std::stoul(part)];
            } else if (node.IsMap() || node.IsNull()) {
                next = node[part];
                if (!next.IsDefined() || next.IsNull()) {
                    node[part] = YAML::Node(YAML::NodeType::Map);
                    next = node[part];
                    source.mark_overridden(walked, label);  // created by this override
                }
            } else {
                throw ConfigError(label, path,
                                  walked + " cannot be entered: its parent holds " +
                                      describe(node) + ", not a mapping or a list");
            }
            node.reset(next);  // rebinds; operator= would overwrite the parent with the child
        }

        const std::string& last = parts.back();
        std::string before = "(unset)";
        if (node.IsSequence()) {
            if (!is_index(last) || std::stoul(last) > node.size()) {
                throw ConfigError(label, path,
                                  path + ": " + last + " is not an index of this list (it has " +
                                      std::to_string(node.size()) + " items; use an index up to " +
                                      std::to_string(node.size()) + " to append)");
            }
            const std::size_t index = std::stoul(last);
            if (index == node.size()) {
                node.push_back(value);
            } else {
                before = short_yaml(node[index]);
                node[index] = value;
            }
        } else if (node.IsMap() || node.IsNull()) {
            const YAML::Node existing = node[last];
            if (existing.IsDefined()) before = short_yaml(existing);
            node[last] = value;
        } else {
            throw ConfigError(label, path,
                              path + " cannot be set: its parent holds " + describe(node) +
                                  ", not a mapping or a list");
        }
        source.mark_overridden(path, label);
        log.push_back(path + ": " + before + " -> " + short_yaml(value));
    }
    return log;
}

}  // namespace loom::config::detail
