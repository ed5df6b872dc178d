// loom's events.jsonl (and metrics.jsonl) lines for the log scanner (log_scanner.h): OOMs with
// their figures, changes (every knob of a decision), saves and stable records as progress, and
// how a run ended.

#include <nlohmann/json.hpp>

#include <utility>

#include "log_scanner.h"
#include "log_text.h"
#include "oom_message_figures.h"

namespace loom::doctor::detail {

namespace {

// "device_oom" (loom's events and warnings), "device" (older wording), "library_oom", "host_oom".
OomKind kind_from_text(std::string_view kind) {
    if (starts_with(kind, "library")) return OomKind::kLibrary;
    if (starts_with(kind, "host")) return OomKind::kHost;
    return OomKind::kDevice;
}

// Fields of loom's JSON lines, read leniently (an events.jsonl from another loom version still
// diagnoses): a missing or null field is absent, a non-string one is given as its JSON text.
std::string json_text(const nlohmann::json& j, const char* key) {
    if (!j.contains(key) || j[key].is_null()) return {};
    return j[key].is_string() ? j[key].get<std::string>() : j[key].dump();
}

std::optional<std::int64_t> json_int(const nlohmann::json& j, const char* key) {
    if (!j.contains(key) || !j[key].is_number()) return std::nullopt;
    return j[key].get<std::int64_t>();
}

std::optional<std::uint64_t> json_bytes(const nlohmann::json& j, const char* key) {
    if (!j.contains(key) || !j[key].is_number() || j[key].get<double>() < 0) return std::nullopt;
    return j[key].get<std::uint64_t>();
}

}  // namespace

bool LogScanner::scan_json(std::string_view s) {
    const nlohmann::json j = nlohmann::json::parse(s.begin(), s.end(), nullptr, false);
    if (j.is_discarded() || !j.is_object()) return false;
    if (j.contains("event") && j["event"].is_string()) {
        votes_[static_cast<int>(LogTool::kLoom)] += 3;
        scan_json_event(j, s);
        return true;
    }
    if (j.contains("step") && j.contains("loss") && j["step"].is_number_integer()) {
        votes_[static_cast<int>(LogTool::kLoom)] += 1;
        on_progress(j["step"].get<std::int64_t>(), s, false);
        return true;
    }
    return false;
}

void LogScanner::scan_json_event(const nlohmann::json& j, std::string_view s) {
    const std::string event = j["event"].get<std::string>();
    const std::optional<std::int64_t> step = json_int(j, "step");
    if (event == "oom") {
        Sighting o;
        o.where = here(s);
        o.phase = parse_phase(json_text(j, "phase")).value_or(Phase::kNone);
        o.explicit_phase = true;
        o.step = step;
        o.kind = kind_from_text(json_text(j, "kind"));
        OomFigures& f = o.figures;
        f.requested = json_bytes(j, "bytes_requested");
        f.allocated = json_bytes(j, "allocated");
        f.reserved = json_bytes(j, "reserved");
        f.free = json_bytes(j, "free");
        f.total = json_bytes(j, "total");
        read_figures(json_text(j, "message"), f);
        if (f.requested || f.allocated || f.reserved || f.free || f.total) f.line = line_;
        add_sighting(std::move(o));
    } else if (event == "change") {
        const std::string rule = json_text(j, "rule");
        const std::string reason = json_text(j, "reason");
        const std::string phase = json_text(j, "phase");
        if (j.contains("changes") && j["changes"].is_array() && !j["changes"].empty()) {
            for (const nlohmann::json& c : j["changes"]) {
                add_change({line_, json_text(c, "knob"), json_text(c, "from"), json_text(c, "to"),
                            rule, reason, phase, step});
            }
        } else if (j.contains("knob")) {
            add_change({line_, json_text(j, "knob"), json_text(j, "from"), json_text(j, "to"), rule,
                        reason, phase, step});
        }
        change_since_oom_ = true;
    } else if (event == "restart" && j.value("memory_related", false)) {
        // loom's supervisor restarted a training process SIGKILLed without a word: the host's
        // OOM killer (one sighting per death; the restart answers it like a plan change).
        Sighting o;
        o.where = here(s);
        o.phase = phase_;
        o.kind = OomKind::kHost;
        add_sighting(std::move(o));
        // "host.memory_caches true -> false": the host rung the supervisor took for the restart.
        const std::string changes = json_text(j, "changes");
        for (std::size_t start = 0; start < changes.size();) {
            std::size_t end = changes.find(", ", start);
            if (end == std::string::npos) end = changes.size();
            const std::string one = changes.substr(start, end - start);
            const std::size_t space = one.find(' ');
            const std::size_t arrow = one.find(" -> ");
            if (space != std::string::npos && arrow != std::string::npos && space < arrow) {
                add_change({line_, one.substr(0, space), one.substr(space + 1, arrow - space - 1),
                            one.substr(arrow + 4), json_text(j, "rule"), json_text(j, "reason"), "",
                            std::nullopt});
            }
            start = end + 2;
        }
        change_since_oom_ = true;
    } else if ((event == "stable" || event == "save") && step) {
        on_progress(*step, s, false);
    } else if (event == "does_not_fit" || event == "worker_state" || event == "host_memory") {
        std::string message = json_text(j, "message");
        if (message.empty()) message = json_text(j, "reason");
        set_outcome(event == "does_not_fit"   ? "does not fit"
                    : event == "worker_state" ? "worker state"
                                              : "host memory",
                    message, s);
        OomFigures f;
        f.free = json_bytes(j, "free");
        f.total = json_bytes(j, "total");
        f.allocated = json_bytes(j, "allocated");
        if (figures_.empty() && (f.free || f.total)) {
            figures_ = f;
            figures_.line = line_;
        }
    }
}

}  // namespace loom::doctor::detail
