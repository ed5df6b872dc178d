#pragma once

// The preflight probe (DESIGN.md "Preflight probe", oom.probe): before step 1, one
// forward+backward at the worst case (the largest bucket at the plan's micro-batch) and one
// sampling pass at the configured preview size, with no optimizer update and the RNG restored.
// Its OOMs go through the ladder at no training cost, which turns "sometimes" OOMs into start-up
// decisions. Scale-up checks a candidate plan with the same two passes, unguarded; the guard's
// measured choice times candidate plans with the training pass (measure()).

#include <functional>
#include <optional>

#include "loom/guard/guard.h"
#include "loom/guard/plan.h"

namespace loom {

class Device;
class TrainingStep;
namespace guard {
class EventLog;
class Guard;
}  // namespace guard

class PreflightProbe {
  public:
    // One sampling pass under a plan's sampling knobs (a no-op when its sampling is off).
    using SamplingPass = std::function<void(const guard::Plan&)>;

    PreflightProbe(guard::Guard& guard, guard::EventLog& events, Device& device, TrainingStep& step,
                   SamplingPass sampling);

    // Both passes under the guard, each with a "probe" event (bucket, peak, OOMs, plan).
    void run();
    // Both passes under `candidate`, unguarded: an OOM propagates (scale-up pins the change).
    void check(const guard::Plan& candidate);
    // The training pass under `candidate` (already applied to the live trainer), unguarded and
    // timed: run twice, the faster counts (the first pays for allocations the second reuses),
    // times the micro-batches of a step. An OOM propagates: the caller (Trainer::measure) counts
    // it as "does not fit", as it does one while applying the candidate.
    guard::Measurement measure(const guard::Plan& candidate);

  private:
    guard::Guard& guard_;
    guard::EventLog& events_;
    Device& device_;
    TrainingStep& step_;
    SamplingPass sampling_;
};

}  // namespace loom
