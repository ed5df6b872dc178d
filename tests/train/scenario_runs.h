#pragma once

// The scenario tests' runs (test_oom_scenarios.cpp for SD, test_flux_training.cpp for Flux): a
// job trained from a preset low_vram level, and what a finished run left in its run folder — the
// events of events.jsonl (all, by name, the ladder's rules in order, the probe's peaks) and the
// number of metrics lines (one per trained step) — and the calibration runs that measure budgets.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "loom/config/job.h"
#include "loom/guard/plan.h"
#include "loom/train/trainer.h"

namespace loom::testing {

inline std::vector<nlohmann::json> read_events(const std::filesystem::path& run) {
    std::vector<nlohmann::json> out;
    std::ifstream in(run / "events.jsonl");
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
}

inline std::vector<nlohmann::json> events_named(const std::vector<nlohmann::json>& all,
                                                const std::string& name) {
    std::vector<nlohmann::json> out;
    for (const nlohmann::json& e : all) {
        if (e.at("event") == name) out.push_back(e);
    }
    return out;
}

// The rules of every change, in order.
inline std::vector<std::string> change_rules(const std::vector<nlohmann::json>& all) {
    std::vector<std::string> out;
    for (const nlohmann::json& e : events_named(all, "change")) out.push_back(e.at("rule"));
    return out;
}

inline std::size_t metric_lines(const std::filesystem::path& run) {
    std::ifstream in(run / "metrics.jsonl");
    std::size_t n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
}

// Trains process 0 of `job` into `run` (its run folder). With `preset_low_vram` the run starts
// from a plan.yaml at that level, written into a fresh run folder (the run resumes that plan).
inline TrainSummary train_scenario(const config::Job& job, const std::filesystem::path& run,
                                   TrainOverrides overrides,
                                   std::optional<int> preset_low_vram = std::nullopt) {
    overrides.progress_line = false;
    if (preset_low_vram) {
        guard::Plan p = guard::plan_from_job(job.config.process.at(0));
        p.low_vram = *preset_low_vram;
        std::filesystem::remove_all(run);
        std::filesystem::create_directories(run);
        guard::save_plan(run / "plan.yaml", p);
        overrides.fresh = false;
    }
    return train_process(job, 0, overrides);
}

// The preflight probe's peak for `part` ("train": a training step, "sample": a preview pass) in
// the events of `run`.
inline std::uint64_t probe_peak(const std::filesystem::path& run, const std::string& part) {
    for (const nlohmann::json& e : events_named(read_events(run), "probe")) {
        if (e.at("part") == part) return e.at("peak").get<std::uint64_t>();
    }
    ADD_FAILURE() << "no probe event for " << part << " in " << run;
    return 0;
}

// One-step calibration runs kept by the job they run, whatever the scenario asking calls it: the
// peaks depend on the job alone, so one run gives a job's train and sample peaks, and a budget
// several scenarios share is measured once.
class CalibrationRuns {
  public:
    // The run folder of the calibration whose job text is `key`; `run` trains it (and returns
    // its folder) the first time the key is asked for.
    const std::filesystem::path& folder(const std::string& key,
                                        const std::function<std::filesystem::path()>& run) {
        auto it = folders_.find(key);
        if (it == folders_.end()) it = folders_.emplace(key, run()).first;
        return it->second;
    }

  private:
    std::map<std::string, std::filesystem::path> folders_;
};

}  // namespace loom::testing
