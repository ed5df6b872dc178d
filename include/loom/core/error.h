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

// The OOM guard gave up: even the most conservative plan it could build does not fit the device
// (exit code 4). The message names the smallest plan tried and the memory figures.
class DoesNotFitError : public Error {
  public:
    using Error::Error;
};

// The device is unusable for reasons no setting can fix — almost nothing free before loom
// allocated anything, or the most conservative plan failing before any step succeeded while
// memory is held elsewhere (exit code 5). The message says to start on a fresh worker.
class WorkerStateError : public Error {
  public:
    using Error::Error;
};

// Another trainer owns the run folder (exit code 6): the message names its PID, host and start
// time and what to do (wait for it, `--wait`, or stop it).
class RunFolderBusyError : public Error {
  public:
    using Error::Error;
};

}  // namespace loom
