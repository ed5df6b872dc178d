#pragma once

// The wording of the guard's console and loom.log lines, written and read back in one place.
// These lines are a file format: users grep them, tests match them, and `loom doctor` parses
// them back out of a console capture or a loom.log. Each kind of line has a struct, a `to_line`
// that writes it (the exact text loom prints) and a `parse_*` that reads it back.
//
// The parsers find a line's marker anywhere in the text, so whatever the logger put before it
// ("[warning] ", loom.log's "2026-11-30 08:00:00.123 [guard] [warning] ") is skipped. They are
// lenient where older loom versions wrote a little differently (the OOM kind "device_oom", a
// plan change without its reason), and never throw. Sizes are printed with two decimals
// (format_bytes_human): they read back exactly only when they print exactly.
//
// Plain C++, no torch; thread-safe (no shared state).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/device/oom_classify.h"
#include "loom/device/phase.h"
#include "loom/guard/plan.h"

namespace loom::guard {

// What main() puts before the message of a DoesNotFitError and a WorkerStateError, and the
// words `loom doctor` and the tool vote look for.
inline constexpr std::string_view kErrorPrefix = "error: ";
inline constexpr std::string_view kDoesNotFitWords = "does not fit: ";
inline constexpr std::string_view kWorkerStateWords = "worker state: ";
inline constexpr std::string_view kPlanChangeWords = "plan change: ";
inline constexpr std::string_view kOomWords = "out of memory in ";

// WARN, one per OOM: "out of memory in <phase>[ at step N] (<kind>): <message>", the kind as
// kind_name() gives it ("device", "library", "host").
struct OomLine {
    Phase phase = Phase::kNone;
    std::optional<std::int64_t> step;
    OomKind kind = OomKind::kDevice;
    std::string message;  // the exception's first line
};
std::string to_line(const OomLine& line);
std::optional<OomLine> parse_oom_line(std::string_view text);

// WARN, one per decision: "plan change: <knob> <from> -> <to>[, <knob> <from> -> <to>...]
// (rule: <id>) — <reason>", or "plan change: no change, retry (rule: <id>) — <reason>" for a
// retry with the same plan (a save).
struct PlanChangeLine {
    std::vector<KnobChange> changes;  // empty: "no change, retry"
    std::string rule;
    std::string reason;
};
std::string to_line(const PlanChangeLine& line);
std::optional<PlanChangeLine> parse_plan_change_line(std::string_view text);
// "<knob> <from> -> <to>, ...": the knob list of a plan change and of the scale-up lines.
std::string knob_changes_text(const std::vector<KnobChange>& changes);

// The DoesNotFitError message when oom.enabled is false: "out of memory in <phase>[ at step N]
// (<message>) and oom.enabled is false, so loom did not try smaller settings; the plan was:
// <plan>".
struct OomDisabledLine {
    Phase phase = Phase::kNone;
    std::optional<std::int64_t> step;
    std::string message;
    std::string plan;  // describe(plan)
};
std::string to_line(const OomDisabledLine& line);
std::optional<OomDisabledLine> parse_oom_disabled_line(std::string_view text);

// The error message when host RAM ran out with every host rung taken: "host RAM ran out in
// <phase>[ at step N] (<message>); device settings cannot help: close other programs, lower
// datasets[].cache_latents (in-RAM caches) or use a machine with more RAM".
struct HostMemoryLine {
    Phase phase = Phase::kNone;
    std::optional<std::int64_t> step;
    std::string message;
};
std::string to_line(const HostMemoryLine& line);
std::optional<HostMemoryLine> parse_host_memory_line(std::string_view text);

// The WorkerStateError message of a device that is dirty before loom allocated anything: "<device>
// shows <free> free of <total> before loom allocated anything ("0 bytes is free"): another
// process or a broken context holds the memory. No setting can fix that — start on a fresh
// worker (or free the GPU), then run the same job again."
struct DirtyDeviceLine {
    std::string device;  // Device::description()
    std::uint64_t free = 0;
    std::uint64_t total = 0;
};
std::string to_line(const DirtyDeviceLine& line);
std::optional<DirtyDeviceLine> parse_dirty_device_line(std::string_view text);

// The last line of a run the guard stopped, as main() prints it: "error: does not fit:
// <message>" or "error: worker state: <message>" (loom.log may carry "[error] does not fit: ..."
// instead of the "error: " prefix).
struct OutcomeLine {
    enum class Kind { kDoesNotFit, kWorkerState };
    Kind kind = Kind::kDoesNotFit;
    std::string message;  // the exception's what()
};
std::string to_line(const OutcomeLine& line);
std::optional<OutcomeLine> parse_outcome_line(std::string_view text);

// INFO: "plan recorded as stable after N steps: <plan>".
struct StableLine {
    std::int64_t steps = 0;
    std::string plan;
};
std::string to_line(const StableLine& line);
std::optional<StableLine> parse_stable_line(std::string_view text);

// WARN: a scale-up change that its probe confirmed, "scale-up: <knobs> (undoing <rule>; probe
// peak <peak> of <total>)".
struct ScaleUpKeptLine {
    std::vector<KnobChange> changes;
    std::string rule;  // the rule whose change was undone
    std::uint64_t peak = 0;
    std::uint64_t total = 0;
};
std::string to_line(const ScaleUpKeptLine& line);
std::optional<ScaleUpKeptLine> parse_scale_up_kept_line(std::string_view text);

// WARN: a scale-up change that did not fit, "scale-up: <knobs> does not fit with N% headroom
// (the probe ran out of memory | probe peak <peak>); pinned for this run".
struct ScaleUpPinnedLine {
    std::vector<KnobChange> changes;
    int headroom_percent = 0;
    std::optional<std::uint64_t> peak;  // nullopt: the probe ran out of memory
};
std::string to_line(const ScaleUpPinnedLine& line);
std::optional<ScaleUpPinnedLine> parse_scale_up_pinned_line(std::string_view text);

// The end of a run that recovered: the trainer's INFO line "N out-of-memory errors recovered
// with M plan changes, S steps lost; final plan: <plan>", and the counts `loom train` prints on
// stdout after the events file, "N out-of-memory errors recovered, M plan changes, S steps lost"
// (no plan). parse_recovered_line reads either.
struct RecoveredLine {
    int ooms = 0;
    int changes = 0;
    std::int64_t steps_lost = 0;
    std::string final_plan;  // empty in the counts form
};
std::string to_line(const RecoveredLine& line);
std::string recovered_counts_text(const RecoveredLine& line);
std::optional<RecoveredLine> parse_recovered_line(std::string_view text);

}  // namespace loom::guard
