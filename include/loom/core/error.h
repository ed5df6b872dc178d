#pragma once

// The loom::Error family. Throw inside, catch at boundaries (main, the guard's phase boundary).
// Every message says what was wrong, where, and what to do about it.

#include <stdexcept>
#include <string>

namespace loom {

class Error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// A job configuration problem. `where` is "file:line:col" (or "--set PATH=VALUE" for an override);
// `key_path` is the dotted path of the offending key ("config.process.0.train.lr").
class ConfigError : public Error {
  public:
    ConfigError(std::string where, std::string key_path, const std::string& message);
    const std::string& where() const { return where_; }
    const std::string& key_path() const { return key_path_; }

  private:
    std::string where_;
    std::string key_path_;
};

// A bad command line (unknown flag, missing argument, malformed value).
class UsageError : public Error {
  public:
    using Error::Error;
};

// A file could not be read or written.
class IoError : public Error {
  public:
    IoError(std::string path, const std::string& message);
    const std::string& path() const { return path_; }

  private:
    std::string path_;
};

// A file was read but its contents are malformed (safetensors, images, checkpoints, ...).
class FormatError : public Error {
  public:
    FormatError(std::string path, const std::string& message);
    const std::string& path() const { return path_; }

  private:
    std::string path_;
};

}  // namespace loom
