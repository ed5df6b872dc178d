#pragma once

// Logging: one named logger per layer ("core", "config", "device", "train", "guard", ...), all
// writing to the same sinks: stderr, plus the run folder's loom.log once a run starts.
// Backed by spdlog inside core only (see format.h for why no fmt/spdlog types appear here).
// Thread-safe.

#include <filesystem>
#include <string>
#include <string_view>

#include "loom/core/format.h"

namespace loom {

enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError, kOff };

class Logger {
  public:
    explicit Logger(std::string name) : name_(std::move(name)) {}

    template <class... A>
    void debug(std::string_view pattern, const A&... args) const {
        write(LogLevel::kDebug, format(pattern, args...));
    }
    template <class... A>
    void info(std::string_view pattern, const A&... args) const {
        write(LogLevel::kInfo, format(pattern, args...));
    }
    template <class... A>
    void warn(std::string_view pattern, const A&... args) const {
        write(LogLevel::kWarn, format(pattern, args...));
    }
    template <class... A>
    void error(std::string_view pattern, const A&... args) const {
        write(LogLevel::kError, format(pattern, args...));
    }

    void write(LogLevel level, const std::string& message) const;
    const std::string& name() const { return name_; }

  private:
    std::string name_;
};

// The logger of one layer.
Logger logger(std::string name);

// Sets the console level (loom.log always keeps debug lines).
void set_log_level(LogLevel level);

// Parses "trace", "debug", "info", "warn", "error", "off"; throws loom::Error otherwise.
LogLevel parse_log_level(std::string_view text);

// Adds a file sink (append mode) shared by every logger. Returns false and logs a warning when
// the file cannot be opened; console logging goes on.
bool add_log_file(const std::filesystem::path& path);

// Removes every file sink (a run folder's loom.log) added so far.
void close_log_files();

}  // namespace loom
