#include "yaml_source.h"

#include <utility>

#include "loom/config/load.h"
#include "loom/core/byte_size.h"
#include "loom/core/error.h"
#include "loom/core/utf8.h"

namespace loom::config::detail {

namespace {

std::string position_string(const std::string& name, std::size_t line, std::size_t column) {
    return name + ":" + std::to_string(line) + ":" + std::to_string(column);
}

// Line and column (1-based) of byte `offset` in `text`.
std::pair<std::size_t, std::size_t> line_column(std::string_view text, std::size_t offset) {
    std::size_t line = 1;
    std::size_t column = 1;
    for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
        if (text[i] == '\n') {
            ++line;
            column = 1;
        } else if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
            ++column;
        }
    }
    return {line, column};
}

bool only_blank_or_comments(std::string_view text) {
    bool in_comment = false;
    for (char c : text) {
        if (in_comment) {
            if (c == '\n') in_comment = false;
            continue;
        }
        if (c == '#') {
            in_comment = true;
        } else if (c != ' ' && c != '\t' && c != '\r' && c != '\n') {
            return false;
        }
    }
    return true;
}

}  // namespace

void check_job_file_size(std::size_t bytes, const std::string& name) {
    if (bytes > kMaxJobFileBytes) {
        throw ConfigError(name, "",
                          "the file is " + format_bytes_human(bytes) + ", larger than the " +
                              format_bytes_human(kMaxJobFileBytes) +
                              " a job file may have; is this the right file?");
    }
}

std::string format_position(const std::string& name, const YAML::Mark& mark) {
    if (mark.is_null()) return name;
    return position_string(name, static_cast<std::size_t>(mark.line) + 1,
                           static_cast<std::size_t>(mark.column) + 1);
}

std::string describe(const YAML::Node& node) {
    if (!node.IsDefined() || node.IsNull()) return "nothing (null)";
    if (node.IsSequence()) return "a list";
    if (node.IsMap()) return "a mapping";
    return "'" + node.Scalar() + "'";
}

std::string join_path(const std::string& parent, const std::string& key) {
    if (parent.empty()) return key;
    if (key.empty()) return parent;
    return parent + "." + key;
}

YamlSource::YamlSource(std::string_view text, std::string name) : name_(std::move(name)) {
    check_job_file_size(text.size(), name_);
    if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
    if (const auto bad = find_invalid_utf8(text)) {
        throw ConfigError(position_string(name_, bad->line, bad->column), "",
                          "the file is not valid UTF-8 (invalid byte at offset " +
                              std::to_string(bad->offset) + "); save it as UTF-8 text");
    }
    if (const std::size_t nul = text.find('\0'); nul != std::string_view::npos) {
        const auto [line, column] = line_column(text, nul);
        throw ConfigError(position_string(name_, line, column), "",
                          "the file contains a NUL byte; a job file must be YAML text");
    }
    if (only_blank_or_comments(text)) {
        throw ConfigError(name_, "",
                          "the file is empty; a job needs at least `job:` and `config:` "
                          "(see configs/ for examples)");
    }
    try {
        root_ = YAML::Load(std::string(text));
    } catch (const YAML::Exception& e) {
        throw ConfigError(format_position(name_, e.mark), "", "YAML syntax error: " + e.msg);
    }
    if (!root_.IsMap()) {
        throw ConfigError(format_position(name_, root_.Mark()), "",
                          "the top level must be a mapping with `job`, `config` and `meta` "
                          "keys, got " +
                              describe(root_));
    }
}

void YamlSource::mark_overridden(const std::string& path, std::string label) {
    overrides_[path] = std::move(label);
}

std::string YamlSource::where(const YAML::Node& node, const std::string& path) const {
    // The longest overridden prefix of `path` wins: a later --set deeper in the tree is the one
    // that wrote this value.
    const std::string* best = nullptr;
    std::size_t best_len = 0;
    for (const auto& [prefix, label] : overrides_) {
        const bool covers = path == prefix || (path.size() > prefix.size() &&
                                               path.compare(0, prefix.size(), prefix) == 0 &&
                                               path[prefix.size()] == '.');
        if (covers && prefix.size() >= best_len) {
            best = &label;
            best_len = prefix.size();
        }
    }
    if (best != nullptr) return *best;
    return format_position(name_, node.Mark());
}

}  // namespace loom::config::detail
