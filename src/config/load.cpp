#include "loom/config/load.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "loom/core/error.h"
#include "overrides.h"
#include "reader.h"
#include "resolve.h"
#include "substitution.h"
#include "yaml_source.h"

namespace loom::config {

namespace {

std::optional<std::string> getenv_lookup(const std::string& name) {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
}

}  // namespace

LoadedJob load_job_text(std::string_view text, const std::string& source_name,
                        const LoadOptions& options) {
    detail::YamlSource source(text, source_name);
    detail::substitute_environment(source, options.env ? options.env : getenv_lookup);
    detail::substitute_name(source);

    LoadedJob loaded;
    loaded.applied_overrides = detail::apply_overrides(source, options.overrides);

    detail::ReadResult result = detail::read_job(source);
    detail::resolve_job(result);

    if (options.strict && !result.warnings.empty()) {
        const Diagnostic& first = result.warnings.front();
        std::string message = first.message;
        if (result.warnings.size() > 1) {
            message += " (and " + std::to_string(result.warnings.size() - 1) +
                       " more; run without --strict to see every warning)";
        }
        throw ConfigError(first.where, first.key_path, message + " [--strict]");
    }
    loaded.job = std::move(result.job);
    loaded.warnings = std::move(result.warnings);
    return loaded;
}

LoadedJob load_job_file(const std::filesystem::path& path, const LoadOptions& options) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
        throw IoError(path.string(), "no such job file");
    }
    if (std::filesystem::is_directory(path, ec)) {
        throw IoError(path.string(), "is a folder; give the path of a job .yaml file");
    }
    const auto size = std::filesystem::file_size(path, ec);
    if (!ec) detail::check_job_file_size(size, path.string());  // before reading it all
    std::ifstream in(path, std::ios::binary);
    if (!in) throw IoError(path.string(), "cannot be opened for reading");
    std::ostringstream buffer;
    buffer << in.rdbuf();
    if (in.bad()) throw IoError(path.string(), "could not be read");
    return load_job_text(buffer.str(), path.string(), options);
}

}  // namespace loom::config
