#pragma once

// The stable-config store as a run sees it (DESIGN.md "Stability and reuse"): what a run reports
// — its start, each out-of-memory error, each plan that proved stable, its end — and what it
// asks: the plans already known for its key. The store layer implements this over SQLite
// (loom/store/store_recorder.h); the guard and the trainer know only this interface.
//
// Implementations never throw. A store that cannot be opened, read or written (corrupt, locked,
// on a read-only disk) says so in the log and the run goes on; the run folder's stable.yaml and
// plan.yaml are written regardless.
//
// Plain C++, no torch.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loom/guard/plan.h"

namespace loom::guard {

// What makes two runs' memory needs comparable: the same model shapes on the same device with
// the same dtype, rank, largest resolution and clip length, quantized (at low_vram level 2) in
// the same qtypes.
struct PlanKey {
    std::string arch;                // "sd1", "sdxl"
    std::string model_fingerprint;   // sha256 of the model's configs and weight headers
    std::string device_name;         // "NVIDIA H200", "sim", "cpu"; "2 x NVIDIA H200": 2 ranks
    std::uint64_t total_memory = 0;  // bytes the device offers (the sim budget, a CUDA cap)
    std::string dtype;               // train.dtype
    int rank = 0;                    // network.linear
    int max_resolution = 0;          // the largest datasets[].resolution
    int frames = 1;                  // the largest datasets[].num_frames
    std::string qtype = "qfloat8";   // the job's qtypes (qtype_text: "qfloat8-te-qint8")

    bool operator==(const PlanKey& o) const {
        return arch == o.arch && model_fingerprint == o.model_fingerprint &&
               device_name == o.device_name && total_memory == o.total_memory && dtype == o.dtype &&
               rank == o.rank && max_resolution == o.max_resolution && frames == o.frames &&
               qtype == o.qtype;
    }
    bool operator!=(const PlanKey& o) const { return !(*this == o); }
};

// "sd1 a1b2c3d4e5f6 on sim (96.00 MiB), float32, rank 4, 512 px" — for log lines.
std::string describe(const PlanKey& key);

// A run (one config.process entry) begins.
struct RunFacts {
    PlanKey key;
    std::string name;        // the process name (the run folder's)
    std::string run_folder;  // absolute path
    std::string job_yaml;    // the job as loom read it (config::emit_job_yaml), for export
    std::size_t process_index = 0;
    Plan plan;  // the plan the run starts from
};

// One out-of-memory error the guard caught.
struct OomFacts {
    std::string phase;  // "train_step", "sample", ... (to_string(Phase))
    std::optional<std::int64_t> step;
    std::string kind;  // "device", "library", "host" (kind_name(OomKind))
    std::optional<std::uint64_t> bytes_requested;
    std::uint64_t in_use = 0;  // device memory in use when the attempt failed
    std::uint64_t total = 0;
    Plan plan;  // the plan that failed
    // Raised by a fault-injection rule (LOOM_FAULTS), not by the device running out: recorded,
    // but it says nothing about what fits, so it never drives reuse.
    bool injected = false;
    std::string message;
};

// A plan trained oom.stable_after steps (or to the end of the run) without an OOM.
struct StableFacts {
    std::int64_t step = 0;           // the training step it was recorded at
    std::int64_t steps_on_plan = 0;  // steps trained on this plan
    std::uint64_t peak = 0;          // the run's highest device memory in use
    double steps_per_second = 0.0;   // over the steps on this plan
    Plan plan;
};

// A run ends: "completed", "interrupted" (stopped on request, resumable), "stopped" (the
// --stop-after test hook, as if killed) or "failed" (an error ended it).
struct RunEnd {
    std::string status;
    std::int64_t steps = 0;  // the last step trained
    int ooms = 0;
    Plan plan;  // the plan it ended on
};

struct StoredStable {
    std::int64_t id = 0;
    Plan plan;
    std::string run_name;
    std::string time;  // ISO 8601 UTC
};

// What the store knows for one key.
struct KnownPlans {
    std::vector<Plan> failed;            // plans that ran out of memory (injected ones excluded)
    std::optional<StoredStable> stable;  // the newest stable plan
};

class PlanStore {
  public:
    virtual ~PlanStore() = default;
    // Nothing known (or the store unreadable): empty.
    virtual KnownPlans known_plans(const PlanKey& key) = 0;
    // The other calls refer to the run begun by the latest run_started.
    virtual void run_started(const RunFacts& run) = 0;
    virtual void oom(const OomFacts& oom) = 0;
    virtual void stable(const StableFacts& stable) = 0;
    virtual void run_finished(const RunEnd& end) = 0;
};

}  // namespace loom::guard
