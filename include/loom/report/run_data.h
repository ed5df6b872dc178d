#pragma once

// A run folder as `loom report` reads it: metrics.jsonl, events.jsonl, plan.yaml, stable.yaml,
// config.yaml and samples/ (train/run_folder.h has the layout). Reading is tolerant — a report is
// most wanted when a run went wrong: a missing file is an empty part, a line that is not a JSON
// object is skipped and counted, a field of the wrong type reads as absent.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace loom::report {

// One line of metrics.jsonl.
struct MetricPoint {
    std::int64_t step = 0;
    double loss = 0.0;
    double lr = 0.0;
    double allocated = 0.0;       // bytes in use after the step
    double peak_allocated = 0.0;  // the step's own peak
    double step_seconds = 0.0;
    double time = 0.0;  // Unix seconds at the step's end
};

struct KnobMove {
    std::string knob;  // "train.batch_size"
    std::string from;
    std::string to;
};

// An out-of-memory error, or a plan change, from events.jsonl.
struct OomMark {
    std::string phase;
    std::optional<std::int64_t> step;  // absent before training (load, cache, probe)
    std::string kind;
    std::string message;
    double peak = 0.0;
    std::string time;
};

struct PlanChange {
    std::string phase;
    std::optional<std::int64_t> step;
    std::string rule;
    std::string reason;
    std::vector<KnobMove> moves;
    std::string plan;  // guard::describe of the plan after it
    std::string time;
};

// A preview image under samples/: "<time>__<step, 9 digits>_<index or grid>.png".
struct SampleImage {
    std::int64_t step = 0;
    std::string file;  // relative to the run folder: "samples/..."
    bool grid = false;
};

struct RunData {
    std::filesystem::path folder;
    std::string name;
    std::string model;
    std::string arch;
    std::int64_t steps_asked = 0;  // train.steps of the job (0: unknown)
    std::string device;
    double total = 0.0;  // the device's memory (the budget on sim), bytes; 0: unknown
    std::string start_plan;
    std::string started;  // ISO times of the first and last event
    std::string last_event;
    // By step: a step trained again after a resume keeps its last line. A folder trained again
    // with --fresh keeps its old lines; everything from before the last fresh start (events,
    // metrics, samples) is left out.
    std::vector<MetricPoint> metrics;
    std::vector<OomMark> ooms;
    std::vector<PlanChange> changes;
    int measurements = 0;  // plans the measured choice timed
    int restarts = 0;      // the supervisor restarted a training process that died
    std::string final_plan_yaml;
    std::string stable_yaml;
    std::vector<SampleImage> samples;  // by step, then name
    // "completed" (a final save), "interrupted", "does not fit", "worker state", "failed" (the
    // supervisor gave up, or the caller says so: report::RenderInput::error), or "running".
    std::string status;
    std::string end_reason;  // the does-not-fit or worker-state event's reason
    std::size_t skipped_lines = 0;
};

RunData read_run(const std::filesystem::path& folder);

// Steps that never made it into metrics.jsonl although a later step did: 0 for loom by design;
// shown so that a user can see it.
std::int64_t steps_lost(const RunData& run);

}  // namespace loom::report
