#include "loom/core/error.h"

#include <utility>

namespace loom {

namespace {
std::string prefixed(const std::string& where, const std::string& message) {
    return where.empty() ? message : where + ": " + message;
}
}  // namespace

ConfigError::ConfigError(std::string where, std::string key_path, const std::string& message)
    : Error(prefixed(where, message)), where_(std::move(where)), key_path_(std::move(key_path)) {}

IoError::IoError(std::string path, const std::string& message)
    : Error(prefixed(path, message)), path_(std::move(path)) {}

FormatError::FormatError(std::string path, const std::string& message)
    : Error(prefixed(path, message)), path_(std::move(path)) {}

}  // namespace loom
