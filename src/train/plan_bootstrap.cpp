#include "loom/train/plan_bootstrap.h"

#include <algorithm>
#include <filesystem>

#include "loom/core/error.h"
#include "loom/core/logging.h"
#include "loom/device/device.h"
#include "loom/guard/plan_reuse.h"
#include "loom/model/loading/model_fingerprint.h"
#include "loom/model/loading/model_location.h"
#include "loom/train/run_folder.h"
#include "train_log.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

// oom.reuse_stable: auto — when the store saw a comparable plan fail for this key, start from
// its stable plan (only ever lighter than the job's), knob by knob in the log.
std::optional<guard::Reuse> reuse_from_store(const guard::Plan& job_plan, guard::PlanStore& store,
                                             const guard::PlanKey& key, guard::EventLog& events) {
    std::optional<guard::Reuse> reuse = guard::reuse_stable_plan(job_plan, store.known_plans(key));
    if (!reuse) return std::nullopt;
    train_log().warn("{}:", reuse->reason);
    for (const guard::KnobChange& c : reuse->changes) {
        train_log().warn("  {}: {} -> {}", c.knob, c.from, c.to);
    }
    events.record("reuse", {{"stable_id", reuse->stable_id},
                            {"reason", reuse->reason},
                            {"plan", guard::describe(reuse->plan)}});
    return reuse;
}

// The run folder's plan.yaml, never heavier than what the job asks for now.
guard::Plan persisted_plan(const RunFolder& run, const guard::Plan& job_plan) {
    guard::Plan p = guard::load_plan(run.plan_yaml());
    // A persisted plan only ever makes the job lighter; what the job asks for now still counts
    // where it is the lighter choice, and the batch semantics are the job's.
    if (p.effective_batch() != job_plan.effective_batch()) {
        train_log().warn(
            "{} was written for an effective batch of {}, the job now asks for {}; "
            "using the job's batch {} x {}",
            run.plan_yaml().string(), p.effective_batch(), job_plan.effective_batch(),
            job_plan.batch_size, job_plan.gradient_accumulation);
        p.batch_size = job_plan.batch_size;
        p.gradient_accumulation = job_plan.gradient_accumulation;
    }
    p.gradient_checkpointing = p.gradient_checkpointing || job_plan.gradient_checkpointing;
    p.sample.enabled = p.sample.enabled && job_plan.sample.enabled;
    train_log().info("starting from the persisted plan {}: {}", run.plan_yaml().string(),
                     guard::describe(p));
    for (const guard::KnobChange& c : guard::diff(job_plan, p)) {
        train_log().info("  {}: the job says {}, the plan says {}", c.knob, c.from, c.to);
    }
    return p;
}

}  // namespace

std::optional<guard::PlanKey> plan_key(const config::ProcessConfig& process, const Device& device) {
    guard::PlanKey key;
    key.arch = process.model.arch.value_or("");
    try {
        key.model_fingerprint = model_fingerprint(locate_model(process.model.name_or_path));
    } catch (const Error& e) {
        train_log().debug("no stable-store key: {}", e.what());
        return std::nullopt;
    }
    key.device_name = device.hardware_name();
    key.total_memory = device.stats().total;
    key.dtype = process.train.dtype;
    key.rank = process.network.linear;
    for (const config::DatasetConfig& d : process.datasets) {
        for (int r : d.resolution) key.max_resolution = std::max(key.max_resolution, r);
        key.frames = std::max(key.frames, d.num_frames);
    }
    // The job's qtypes: what level 2 would quantize in, which a stable plan at that level
    // depends on (a plan.yaml that says otherwise is the run's own, not the store's business).
    key.qtype = guard::qtype_text(guard::plan_from_job(process));
    return key;
}

StartingPlan starting_plan(const config::ProcessConfig& process, const RunFolder& run, bool fresh,
                           guard::PlanStore* store, const std::optional<guard::PlanKey>& key,
                           guard::EventLog& events) {
    const guard::Plan job_plan = guard::plan_from_job(process);
    if (!fresh && fs::exists(run.plan_yaml())) return {persisted_plan(run, job_plan), std::nullopt};
    if (store != nullptr && key && process.choices.reuse_stable == config::ReuseStable::kAuto) {
        if (std::optional<guard::Reuse> reuse = reuse_from_store(job_plan, *store, *key, events)) {
            return {reuse->plan, reuse->stable_id};
        }
    }
    return {job_plan, std::nullopt, /*from_job=*/true};
}

}  // namespace loom
