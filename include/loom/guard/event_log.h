#pragma once

// events.jsonl: one JSON object per line, appended and flushed as it happens, so a killed run
// keeps every line written before it died (DESIGN.md "Run folder"). Every line has "time"
// (ISO 8601 UTC, milliseconds) and "event": oom, change, probe, stable, reuse, save, start,
// does_not_fit, worker_state, host_memory. `loom doctor` and the benchmarks read it back.

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "loom/guard/ladder_policy.h"

namespace loom::guard {

// A JSON value for the generic record(): text, integer, number or boolean.
struct EventField {
    enum class Type { kText, kInt, kNumber, kBool };
    std::string key;
    Type type = Type::kText;
    std::string text;
    std::int64_t integer = 0;
    double number = 0.0;

    EventField(std::string k, std::string v) : key(std::move(k)), text(std::move(v)) {}
    EventField(std::string k, const char* v) : key(std::move(k)), text(v) {}
    EventField(std::string k, std::int64_t v) : key(std::move(k)), type(Type::kInt), integer(v) {}
    EventField(std::string k, int v) : EventField(std::move(k), std::int64_t(v)) {}
    EventField(std::string k, std::uint64_t v) : EventField(std::move(k), std::int64_t(v)) {}
    EventField(std::string k, double v) : key(std::move(k)), type(Type::kNumber), number(v) {}
    EventField(std::string k, bool v) : key(std::move(k)), type(Type::kBool), integer(v) {}
};

class EventLog {
  public:
    // Appends to `file` (created when missing). An empty path makes a log that writes nothing.
    explicit EventLog(std::filesystem::path file = {});

    // {"event":"oom", phase, work, step, kind, bytes_requested, allocated, reserved, free,
    //  total, peak, bucket, message}
    void oom(const OomEvent& event, const std::string& plan);
    // {"event":"change", phase, step, rule, reason, knob, from, to, changes:[...], plan}
    // or does_not_fit / worker_state / host_memory with the same fields.
    void decision(const Decision& decision, const OomEvent& event);
    // Any other record: {"event": name, fields...}.
    void record(const std::string& name, const std::vector<EventField>& fields);

    const std::filesystem::path& file() const { return file_; }

  private:
    void append(const std::string& json_line);

    std::filesystem::path file_;
    std::ofstream out_;
};

// "2026-11-30T08:00:00.123Z"
std::string utc_timestamp_now();

}  // namespace loom::guard
