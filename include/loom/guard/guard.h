#pragma once

// The recovery engine: runs each phase of a job under the guard (DESIGN.md "Recovery
// specification"). An attempt that runs out of memory is caught at the phase boundary; the
// failed attempt's tensors die with its scope, the target drops what it kept (gradients back to
// undefined, partial accumulation), the device cache is emptied, the event is written, the
// ladder policy decides, the decision is applied to the live trainer and persisted, and the
// same work runs again — outside the catch block. Errors that are not OOM pass through untouched.
// The device's peak counter is reset before each attempt, so an OOM event's "peak" is what the
// failed attempt had in use when it failed, and a step's peak in metrics.jsonl is its own.
//
// The engine knows the Plan, not the model: what a knob means for the live trainer is the
// target's business (GuardedTarget::apply_plan).

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "loom/device/device.h"
#include "loom/device/phase.h"
#include "loom/guard/event_log.h"
#include "loom/guard/ladder_policy.h"
#include "loom/guard/plan.h"
#include "loom/guard/plan_store.h"
#include "loom/guard/rank_agreement.h"

namespace loom::guard {

// One candidate plan measured by the target: one forward and backward of the worst-case
// micro-batch under it (no optimizer update, the RNG restored, the live plan restored after).
struct Measurement {
    bool fits = false;           // no OOM
    std::uint64_t peak = 0;      // the device's peak during it
    double step_seconds = 0.0;   // the micro-batch's time x the micro-batches of a step
    std::string clock = "wall";  // which clock timed it (device/step_clock.h)
};

// What the engine needs from the trainer it protects.
class GuardedTarget {
  public:
    virtual ~GuardedTarget() = default;
    // After an OOM: drop what the failed attempt left behind outside its own scope.
    virtual void release_after_oom() = 0;
    // Makes the live trainer use `to` (it used `from` until now).
    virtual void apply_plan(const Plan& from, const Plan& to) = 0;
    // The active buckets under the current plan (before any bucket exists: the defaults).
    virtual BucketFacts bucket_facts() const = 0;
    // Measures `candidate` (see Measurement) while the live plan is `current`; nullopt when the
    // target cannot (nothing to probe yet). Errors that are not OOM propagate.
    virtual std::optional<Measurement> measure(const Plan& current, const Plan& candidate) {
        (void)current;
        (void)candidate;
        return std::nullopt;
    }
};

struct GuardOptions {
    bool enabled = true;  // oom.enabled; false: the first OOM ends the run ("does not fit")
    PolicyContext context;
    std::filesystem::path plan_file;    // plan.yaml, rewritten on every change (empty: none)
    std::filesystem::path stable_file;  // stable.yaml (empty: none)
    int stable_after = 50;              // steps on one plan before it is recorded as stable
    bool scale_up = false;              // oom.scale_up: undo changes once stable
    double scale_up_headroom = 0.10;    // a scale-up probe must leave this share of memory free
    // oom.probe: after a training-step OOM, measure the plans around the documented one that
    // differ only in how a step is computed (measured_candidates) and take the fastest that fits
    // with measure_headroom to spare.
    bool measure = false;
    double measure_headroom = 0.05;
    // The stable-config store: told of each OOM and each stable plan (nullptr: none).
    PlanStore* store = nullptr;
    // The other ranks of a data-parallel run (nullptr: this process trains alone). Every
    // attempt then ends with the group's outcome and every OOM with rank 0's one decision
    // (rank_agreement.h); the measured choice and scale-up are not taken (their timings and
    // headroom are one rank's).
    RankAgreement* agreement = nullptr;
    int ranks = 1;  // how many (stable.yaml says so when more than one)
};

class Guard {
  public:
    Guard(Device& device, Plan plan, GuardOptions options, EventLog& events);

    void set_target(GuardedTarget* target) { target_ = target; }
    const Plan& plan() const { return plan_; }

    // Worker-state check before loom allocates anything: a device that shows almost nothing
    // free ends the run at once (WorkerStateError), with the figures.
    void check_device_clean();

    // Runs `attempt` in `phase` (at 1-based training `step`) until it completes, recovering
    // from OOMs as described above. `work` overrides what the phase's work is (the probe's
    // sampling pass is kSample). Throws DoesNotFitError or WorkerStateError when the ladder
    // gives up, loom::Error for host-memory exhaustion, and rethrows anything that is not OOM.
    void run(Phase phase, std::optional<std::int64_t> step, const std::function<void()>& attempt,
             std::optional<Work> work = std::nullopt);

    // Several ranks, inside an attempt: asks the group whether every rank got this far (their
    // forward and backward passes) before this rank does what the others must do too (the
    // gradients' all-reduce, the optimizer update). Throws PeersFailed when another rank failed;
    // the guard then retries with the others. One process: nothing to ask.
    void agree_so_far();

    // The micro-batch about to run (the "sometimes" rule needs the failing batch's bucket; the
    // events name its frames too).
    void note_bucket(int width, int height, int frames = 1);
    // A training step completed: its buckets trained fine; counts toward stability.
    void step_succeeded(std::int64_t step);
    // A sampling pass completed (it may leave allocator memory behind).
    void sample_ran() { after_sample_ = true; }
    // End of the run: records the plan as stable when it has not been yet.
    void finish(std::int64_t step);

    // Scale-up (oom.scale_up): once the plan has been stable for stable_after steps, undo the
    // most recent change that is not pinned — one knob at a time, in reverse order — after
    // checking it with `probe(candidate)` (the worst-case step and preview under it). The
    // candidate is kept when the probe fits with the headroom to spare; otherwise the target
    // returns to the current plan and the change is pinned for the rest of the run. Returns true
    // when a change was undone. Errors that are not OOM propagate.
    bool maybe_scale_up(std::int64_t step, const std::function<void(const Plan&)>& probe);

    // The denoiser's blocks as the ladder's streaming rungs and scale-up see them
    // (PolicyContext::block_bytes and stream_overhead): told once the model is placed, and again
    // whenever the sizes change (low_vram's level 2 quantizes them).
    void set_stream_facts(std::vector<std::uint64_t> block_bytes, std::uint64_t overhead);

    // The job's own plan at level 3 learns its streamed-block count once the model is loaded
    // (ai-toolkit's layer_offloading_transformer_percent of the blocks): the plan and the plan the
    // run started from take it, and plan.yaml is written again. Before any change only.
    void set_starting_streamed_blocks(int count);

    int oom_count() const { return ooms_; }
    // The highest device memory in use during any guarded phase so far.
    std::uint64_t peak() const { return run_peak_; }
    int change_count() const { return changes_; }
    const History& history() const { return history_; }

  private:
    OomEvent make_event(Phase phase, Work work, std::optional<std::int64_t> step, OomKind kind,
                        const std::exception_ptr& failure) const;
    void apply(const Decision& decision);
    // Several ranks: the decision rank 0 takes from the first failing rank's event, on every
    // rank; `decisive` becomes that event.
    Decision decide_together(const std::optional<OomEvent>& own, OomEvent& decisive);
    // With the probe on, a training-step rung is answered by measurement (ladder_policy.h,
    // measured_candidates): a reversible documented rung is measured with its alternatives
    // around the failing plan and the fastest that fits replaces it (measured_choice); after a
    // rung that cannot be undone, the plans around the new one are measured and the fastest that
    // fits is taken as a change of its own (measure_after). The documented plan wins ties within
    // 10%; with nothing measurable or nothing fitting, the documented order stands.
    Decision measured_choice(const Decision& documented, const OomEvent& event);
    void measure_after(const Decision& taken, const OomEvent& event);
    // Measures `candidates` (the first is the preferred one) from the live plan; the index of the
    // fastest that fits — the preferred one when it runs at all, another when it leaves
    // measure_headroom to spare — -1 when none does, nullopt when the target cannot measure.
    // Records a "measure" event each and fills `figures`.
    std::optional<int> measure_candidates(const std::vector<Plan>& candidates,
                                          const std::string& after, std::string& figures);
    std::uint64_t measure_limit() const;
    void record_stable(std::int64_t step);
    void plan_changed();

    Device& device_;
    Plan plan_;
    GuardOptions options_;
    EventLog& events_;
    GuardedTarget* target_ = nullptr;
    Plan job_plan_;  // the plan the run started from: the measured choice's upper bounds
    History history_;
    std::optional<std::pair<int, int>> bucket_;  // of the running micro-batch
    int bucket_frames_ = 1;
    std::set<std::int64_t> step_buckets_;  // areas noted during the running step
    bool after_sample_ = false;
    std::int64_t steps_on_plan_ = 0;
    double step_seconds_on_plan_ = 0.0;  // the successful training attempts' own time
    bool stable_recorded_ = false;
    // Changes taken, oldest first: the plan before and after each, and whether scale-up pinned it.
    struct Taken {
        Plan before;
        Plan after;
        std::string rule;
        bool pinned = false;
    };
    // Scale-up's candidate for undoing `change`: a change that streamed more blocks comes back one
    // block at a time (the plan with one block fewer streaming, while more than before it still
    // would); any other all at once. Sets `whole` when the candidate undoes the change entirely.
    Plan scale_up_candidate(const Taken& change, bool& whole) const;
    std::vector<Taken> taken_;  // a measured change is pinned: scale-up must not walk it back
    std::uint64_t run_peak_ = 0;
    int ooms_ = 0;
    int changes_ = 0;
};

// "Tried to allocate 16.00 MiB" (CUDA's and sim's wording) → 16 MiB; nullopt when absent.
std::optional<std::uint64_t> requested_bytes(const std::string& message);

}  // namespace loom::guard
