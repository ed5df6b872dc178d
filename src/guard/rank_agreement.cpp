#include "loom/guard/rank_agreement.h"

#include <nlohmann/json.hpp>

#include "loom/core/error.h"

namespace loom::guard {

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& what, const std::exception& e) {
    throw FormatError("a rank's message", what + " cannot be read (" + e.what() +
                                              "); every rank must run the same loom build");
}

}  // namespace

std::string event_to_text(const OomEvent& e) {
    json j;
    j["phase"] = static_cast<int>(e.phase);
    j["work"] = static_cast<int>(e.work);
    j["step"] = e.step ? json(*e.step) : json(nullptr);
    j["kind"] = static_cast<int>(e.kind);
    j["bytes_requested"] = e.bytes_requested ? json(*e.bytes_requested) : json(nullptr);
    j["memory"] = {e.memory.allocated,     e.memory.reserved, e.memory.peak_allocated,
                   e.memory.peak_reserved, e.memory.total,    e.memory.free};
    j["bucket"] = e.bucket ? json({e.bucket->first, e.bucket->second}) : json(nullptr);
    j["bucket_frames"] = e.bucket_frames;
    j["active"] = e.buckets.active;
    j["largest_area"] = e.buckets.largest_area;
    j["next_cap"] = e.buckets.next_cap ? json(*e.buckets.next_cap) : json(nullptr);
    j["smallest_side"] = e.buckets.smallest_side;
    j["longest_clip"] = e.buckets.longest_clip ? json(*e.buckets.longest_clip) : json(nullptr);
    j["after_sample"] = e.after_sample;
    j["message"] = e.message;
    return j.dump();
}

OomEvent event_from_text(const std::string& text) {
    try {
        const json j = json::parse(text);
        OomEvent e;
        e.phase = static_cast<Phase>(j.at("phase").get<int>());
        e.work = static_cast<Work>(j.at("work").get<int>());
        if (!j.at("step").is_null()) e.step = j.at("step").get<std::int64_t>();
        e.kind = static_cast<OomKind>(j.at("kind").get<int>());
        if (!j.at("bytes_requested").is_null())
            e.bytes_requested = j.at("bytes_requested").get<std::uint64_t>();
        const json& m = j.at("memory");
        e.memory.allocated = m.at(0).get<std::uint64_t>();
        e.memory.reserved = m.at(1).get<std::uint64_t>();
        e.memory.peak_allocated = m.at(2).get<std::uint64_t>();
        e.memory.peak_reserved = m.at(3).get<std::uint64_t>();
        e.memory.total = m.at(4).get<std::uint64_t>();
        e.memory.free = m.at(5).get<std::uint64_t>();
        if (!j.at("bucket").is_null())
            e.bucket =
                std::make_pair(j.at("bucket").at(0).get<int>(), j.at("bucket").at(1).get<int>());
        e.bucket_frames = j.at("bucket_frames").get<int>();
        e.buckets.active = j.at("active").get<std::size_t>();
        e.buckets.largest_area = j.at("largest_area").get<std::int64_t>();
        if (!j.at("next_cap").is_null()) e.buckets.next_cap = j.at("next_cap").get<std::int64_t>();
        e.buckets.smallest_side = j.at("smallest_side").get<int>();
        if (!j.at("longest_clip").is_null())
            e.buckets.longest_clip = j.at("longest_clip").get<int>();
        e.after_sample = j.at("after_sample").get<bool>();
        e.message = j.at("message").get<std::string>();
        return e;
    } catch (const json::exception& e) {
        bad("an out-of-memory report", e);
    }
}

std::string decision_to_text(const Decision& d) {
    json j;
    j["action"] = static_cast<int>(d.action);
    j["plan"] = plan_to_yaml(d.plan);
    j["rule"] = d.rule;
    j["reason"] = d.reason;
    return j.dump();
}

Decision decision_from_text(const std::string& text, const Plan& current) {
    try {
        const json j = json::parse(text);
        Decision d;
        d.action = static_cast<Decision::Action>(j.at("action").get<int>());
        d.plan = parse_plan(j.at("plan").get<std::string>(), "rank 0's decision");
        d.rule = j.at("rule").get<std::string>();
        d.reason = j.at("reason").get<std::string>();
        d.changes = diff(current, d.plan);
        return d;
    } catch (const json::exception& e) {
        bad("rank 0's decision", e);
    }
}

}  // namespace loom::guard
