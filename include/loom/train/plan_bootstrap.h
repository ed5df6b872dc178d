#pragma once

// The plan a run starts from (DESIGN.md "Stability and reuse"): the job's own settings; or, in
// a run folder that already has one, its persisted plan.yaml (only ever lighter than the job,
// the job's batch semantics kept); or — a fresh run whose key the stable-config store knows a
// comparable failure for — the store's stable plan (oom.reuse_stable: auto). And the store's
// key for the run, computed from files and the device before any weight is loaded, so a reused
// plan also governs the load.

#include <cstdint>
#include <optional>

#include "loom/config/job.h"
#include "loom/guard/event_log.h"
#include "loom/guard/plan.h"
#include "loom/guard/plan_store.h"

namespace loom {

class Device;
class RunFolder;

// The store's key: arch, model fingerprint, device, dtype, rank, largest resolution and frames.
// nullopt when the model cannot be read (the load reports that properly).
std::optional<guard::PlanKey> plan_key(const config::ProcessConfig& process, const Device& device);

struct StartingPlan {
    guard::Plan plan;
    std::optional<std::int64_t> reused_stable_id;  // the store's stable plan it came from
    // The job's own plan (no plan.yaml, no stable plan): what the job says that needs the model
    // to become a knob (model.layer_offloading_transformer_percent) is still to be resolved.
    bool from_job = false;
};

// `fresh` (--fresh) ignores the run folder's plan.yaml. `store` and `key` may be null: no reuse.
// A reuse is logged knob by knob and written to `events` as a "reuse" event.
StartingPlan starting_plan(const config::ProcessConfig& process, const RunFolder& run, bool fresh,
                           guard::PlanStore* store, const std::optional<guard::PlanKey>& key,
                           guard::EventLog& events);

}  // namespace loom
