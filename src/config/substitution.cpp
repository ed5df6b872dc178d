#include "substitution.h"

#include <cctype>

#include "loom/core/error.h"

namespace loom::config::detail {

namespace {

// Calls `fn(node, path)` for every scalar value (not keys) below `node`.
template <class Fn>
void for_each_scalar(YAML::Node node, const std::string& path, Fn&& fn) {
    if (node.IsScalar()) {
        fn(node, path);
    } else if (node.IsMap()) {
        for (auto it = node.begin(); it != node.end(); ++it) {
            const std::string key = it->first.IsScalar() ? it->first.Scalar() : "?";
            for_each_scalar(it->second, join_path(path, key), fn);
        }
    } else if (node.IsSequence()) {
        for (std::size_t i = 0; i < node.size(); ++i) {
            for_each_scalar(node[i], join_path(path, std::to_string(i)), fn);
        }
    }
}

bool is_name_char(char c, bool first) {
    return c == '_' || std::isalpha(static_cast<unsigned char>(c)) ||
           (!first && std::isdigit(static_cast<unsigned char>(c)));
}

}  // namespace

void substitute_environment(YamlSource& source, const EnvLookup& env) {
    for_each_scalar(source.root(), "", [&](YAML::Node node, const std::string& path) {
        const std::string& text = node.Scalar();
        if (text.find("${") == std::string::npos) return;
        std::string out;
        std::size_t i = 0;
        while (i < text.size()) {
            if (text.compare(i, 2, "${") != 0) {
                out.push_back(text[i++]);
                continue;
            }
            const std::size_t close = text.find('}', i + 2);
            const std::string name =
                close == std::string::npos ? "" : text.substr(i + 2, close - i - 2);
            bool valid = !name.empty();
            for (std::size_t k = 0; k < name.size() && valid; ++k) {
                valid = is_name_char(name[k], k == 0);
            }
            if (!valid) {
                out.push_back(text[i++]);  // not a ${VAR} reference; kept as written
                continue;
            }
            const std::optional<std::string> value = env(name);
            if (!value) {
                throw ConfigError(source.where(node, path), path,
                                  path + " uses ${" + name + "}, but the environment variable " +
                                      name + " is not set; export it or use --set " + path +
                                      "=VALUE");
            }
            out += *value;
            i = close + 1;
        }
        node = out;
    });
}

void substitute_name(YamlSource& source) {
    // Const lookups: a missing key gives an undefined node instead of inserting one.
    const YAML::Node& root = source.root();
    const YAML::Node config = root["config"];
    if (!config.IsDefined() || !config.IsMap()) return;  // the typed reader reports it
    const YAML::Node name_node = config["name"];
    if (!name_node.IsDefined() || !name_node.IsScalar()) return;
    const std::string name = name_node.Scalar();
    for_each_scalar(source.root(), "", [&](YAML::Node node, const std::string& path) {
        if (path == "config.name") return;
        std::string text = node.Scalar();
        bool changed = false;
        for (std::size_t pos = text.find("[name]"); pos != std::string::npos;
             pos = text.find("[name]", pos + name.size())) {
            text.replace(pos, 6, name);
            changed = true;
        }
        if (changed) node = text;
    });
}

}  // namespace loom::config::detail
