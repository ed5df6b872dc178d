#pragma once

// What a user and a tool see of each training step: one metrics.jsonl line (step, time, loss,
// lr, step seconds, buckets, device memory and the step's phase profile) and the progress line
// "step 12/400 loss 0.1234 lr 1.00e-04 3.21 it/s mem 9.87 MiB ETA 00:02:01" — one updating line
// on a terminal, else a log line every logging.log_every steps (and the first and last).

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "loom/device/memory_stats.h"
#include "loom/train/step_times.h"

namespace loom {

struct StepReport {
    std::int64_t step = 0;  // 1-based: the step just trained
    double loss = 0.0;
    double lr = 0.0;
    double seconds = 0.0;              // the step's wall time, retries included
    std::vector<std::string> buckets;  // the step trained in ("64x64", a clip "64x64x9f")
    MemoryStats memory;                // the device after the step
    StepTimes times;                   // of the step's successful attempt
    // On sim: the step's time by the modelled clock (device/step_clock.h), retries included, so
    // that benchmarks compare plans as the measured choice does; unset elsewhere.
    std::optional<double> modelled_seconds;
};

class Progress {
  public:
    // The rate and ETA count from construction. `tty`: draw one updating line on stderr. An
    // empty `metrics_file` writes no metrics.jsonl (the ranks other than 0 of a data-parallel run).
    Progress(std::filesystem::path metrics_file, std::int64_t total_steps, bool tty, int log_every);

    void step_done(const StepReport& report);
    // Steps reported since construction.
    std::int64_t steps_reported() const { return reported_; }

  private:
    void write_metrics(const StepReport& r);

    std::filesystem::path metrics_file_;
    std::ofstream metrics_;  // open for the run: one line per step, flushed per line
    std::int64_t total_steps_;
    bool tty_;
    int log_every_;
    double started_;  // steady-clock seconds
    std::int64_t reported_ = 0;
};

// "01:02:03"
std::string format_eta(double seconds);

}  // namespace loom
