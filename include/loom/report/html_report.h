#pragma once

// `loom report RUN_DIR`: one self-contained HTML file (no network, no external script, style or
// font) that shows a run at a glance — the header (job, model, device, steps, time, OOMs
// recovered, steps lost), loss and learning rate, device memory against the device with every
// OOM and plan change marked, throughput with the plan in effect shaded, the preview grids by
// step, the plan timeline, the final and stable plans, and the store's history for the job's key.
// `loom train` refreshes it at every checkpoint and at the end, failure included.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "loom/report/run_data.h"

namespace loom::report {

// What the stable-config store knows of runs with this run's key (store_history.h reads it).
struct HistoryRun {
    std::string name;
    std::string folder;
    std::string status;
    std::string started;
    std::optional<std::int64_t> steps;
    std::optional<std::int64_t> ooms;
    std::string end_plan;  // guard::describe, or empty
    bool this_run = false;
};

struct HistoryStable {
    std::string run_name;
    std::string time;
    std::string plan;  // guard::describe
    double steps_per_second = 0.0;
    std::uint64_t peak = 0;
};

struct StoreHistory {
    std::string store_file;
    std::string key;                     // the key in words: arch, device, memory, rank, resolution
    std::vector<HistoryRun> runs;        // oldest first
    std::vector<HistoryStable> stables;  // newest first
};

struct RenderInput {
    RunData run;
    std::optional<StoreHistory> history;
    std::string error;  // the run stopped with this error (empty: it did not)
    // Links into the run folder (samples, config.yaml) start with this: "" when the page is in
    // the run folder, the relative way there when it is written elsewhere.
    std::string link_base;
};

std::string render_html(const RenderInput& input);

// Reads `run_folder`, renders and writes `out` atomically (a reader never sees half a file).
void write_report(const std::filesystem::path& run_folder, const std::filesystem::path& out,
                  const std::optional<StoreHistory>& history = std::nullopt,
                  const std::string& error = {});

}  // namespace loom::report
