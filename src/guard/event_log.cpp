#include "loom/guard/event_log.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <ctime>

#include "loom/core/error.h"

namespace loom::guard {

std::string utc_timestamp_now() {
    const auto now = std::chrono::system_clock::now();
    const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() %
        1000;
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900,
                  utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, int(ms));
    return buf;
}

namespace {

nlohmann::json base(const std::string& name) {
    return nlohmann::json{{"time", utc_timestamp_now()}, {"event", name}};
}

void add_where(nlohmann::json& j, const OomEvent& e) {
    j["phase"] = to_string(e.phase);
    j["work"] = to_string(e.work);
    j["step"] = e.step ? nlohmann::json(*e.step) : nlohmann::json(nullptr);
}

}  // namespace

EventLog::EventLog(std::filesystem::path file) : file_(std::move(file)) {
    if (file_.empty()) return;
    out_.open(file_, std::ios::app);
    if (!out_) throw IoError(file_.string(), "cannot be opened for appending");
}

void EventLog::append(const std::string& line) {
    if (!out_.is_open()) return;
    out_ << line << '\n';
    out_.flush();
}

void EventLog::oom(const OomEvent& e, const std::string& plan) {
    nlohmann::json j = base("oom");
    add_where(j, e);
    j["kind"] = kind_name(e.kind);
    j["bytes_requested"] =
        e.bytes_requested ? nlohmann::json(*e.bytes_requested) : nlohmann::json(nullptr);
    j["allocated"] = e.memory.allocated;
    j["reserved"] = e.memory.reserved;
    j["free"] = e.memory.free;
    j["total"] = e.memory.total;
    j["peak"] = e.memory.peak_allocated;
    // As data::BucketSize::key names it: "512x512", a clip's "512x512x9f".
    if (e.bucket) {
        std::string key = std::to_string(e.bucket->first);
        key += 'x';
        key += std::to_string(e.bucket->second);
        if (e.bucket_frames > 1) {
            key += 'x';
            key += std::to_string(e.bucket_frames);
            key += 'f';
        }
        j["bucket"] = key;
    } else {
        j["bucket"] = nullptr;
    }
    j["after_sample"] = e.after_sample;
    j["plan"] = plan;
    j["message"] = e.message;
    append(j.dump());
}

void EventLog::decision(const Decision& d, const OomEvent& e) {
    const bool retry = d.action == Decision::Action::kRetry;
    nlohmann::json j = base(retry ? "change" : to_string(d.action));
    add_where(j, e);
    j["rule"] = d.rule;
    j["reason"] = d.reason;
    nlohmann::json changes = nlohmann::json::array();
    for (const KnobChange& c : d.changes) {
        changes.push_back({{"knob", c.knob}, {"from", c.from}, {"to", c.to}});
    }
    if (!d.changes.empty()) {
        j["knob"] = d.changes.front().knob;
        j["from"] = d.changes.front().from;
        j["to"] = d.changes.front().to;
    }
    j["changes"] = changes;
    j["plan"] = describe(d.plan);
    append(j.dump());
}

void EventLog::record(const std::string& name, const std::vector<EventField>& fields) {
    nlohmann::json j = base(name);
    for (const EventField& f : fields) {
        switch (f.type) {
            case EventField::Type::kText: j[f.key] = f.text; break;
            case EventField::Type::kInt: j[f.key] = f.integer; break;
            case EventField::Type::kNumber: j[f.key] = f.number; break;
            case EventField::Type::kBool: j[f.key] = f.integer != 0; break;
        }
    }
    append(j.dump());
}

}  // namespace loom::guard
