#include "loom/core/logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "loom/core/error.h"

namespace loom {

namespace {

spdlog::level::level_enum to_spdlog(LogLevel level) {
    switch (level) {
        case LogLevel::kTrace: return spdlog::level::trace;
        case LogLevel::kDebug: return spdlog::level::debug;
        case LogLevel::kInfo: return spdlog::level::info;
        case LogLevel::kWarn: return spdlog::level::warn;
        case LogLevel::kError: return spdlog::level::err;
        case LogLevel::kOff: return spdlog::level::off;
    }
    return spdlog::level::info;
}

// One rank of several (torchrun's WORLD_SIZE and RANK; `loom train --nproc` sets them too):
// "[rank1]: ", the prefix torchrun gives its workers' lines, so that the ranks' interleaved
// output (and `loom doctor` reading it) tells them apart. Empty for a process on its own.
std::string rank_prefix() {
    const char* world = std::getenv("WORLD_SIZE");
    const char* rank = std::getenv("RANK");
    if (world == nullptr || rank == nullptr) return {};
    return std::string("[rank") + rank + "]: ";
}

// Every logger shares these sinks; a sink added later reaches loggers created earlier.
struct Sinks {
    std::mutex mutex;
    spdlog::sink_ptr console;
    std::vector<spdlog::sink_ptr> files;

    Sinks() {
        console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
        console->set_pattern(rank_prefix() + "%^[%l]%$ %v");
        console->set_level(spdlog::level::info);
    }
};

Sinks& sinks() {
    static Sinks s;
    return s;
}

std::shared_ptr<spdlog::logger> get_or_create(const std::string& name) {
    Sinks& s = sinks();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (auto existing = spdlog::get(name)) return existing;
    std::vector<spdlog::sink_ptr> all{s.console};
    all.insert(all.end(), s.files.begin(), s.files.end());
    auto created = std::make_shared<spdlog::logger>(name, all.begin(), all.end());
    created->set_level(spdlog::level::trace);
    created->flush_on(spdlog::level::warn);
    spdlog::register_logger(created);
    return created;
}

}  // namespace

void Logger::write(LogLevel level, const std::string& message) const {
    get_or_create(name_)->log(to_spdlog(level), "{}", message);
}

Logger logger(std::string name) {
    return Logger(std::move(name));
}

void set_log_level(LogLevel level) {
    Sinks& s = sinks();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.console->set_level(to_spdlog(level));
}

LogLevel parse_log_level(std::string_view text) {
    if (text == "trace") return LogLevel::kTrace;
    if (text == "debug") return LogLevel::kDebug;
    if (text == "info") return LogLevel::kInfo;
    if (text == "warn" || text == "warning") return LogLevel::kWarn;
    if (text == "error") return LogLevel::kError;
    if (text == "off") return LogLevel::kOff;
    throw Error("invalid log level '" + std::string(text) +
                "' (use trace, debug, info, warn, error or off)");
}

bool add_log_file(const std::filesystem::path& path) {
    spdlog::sink_ptr sink;
    try {
        sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path.string(), false);
    } catch (const spdlog::spdlog_ex& e) {
        logger("core").warn("cannot open log file {}: {}", path.string(), e.what());
        return false;
    }
    sink->set_pattern("%Y-%m-%d %H:%M:%S.%e [%n] [%l] %v");
    sink->set_level(spdlog::level::debug);
    Sinks& s = sinks();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.files.push_back(sink);
    spdlog::apply_all(
        [&](const std::shared_ptr<spdlog::logger>& l) { l->sinks().push_back(sink); });
    return true;
}

void close_log_files() {
    Sinks& s = sinks();
    std::lock_guard<std::mutex> lock(s.mutex);
    spdlog::apply_all([&](const std::shared_ptr<spdlog::logger>& l) {
        auto& ls = l->sinks();
        ls.erase(std::remove_if(ls.begin(), ls.end(),
                                [&](const spdlog::sink_ptr& p) { return p != s.console; }),
                 ls.end());
    });
    s.files.clear();
}

}  // namespace loom
