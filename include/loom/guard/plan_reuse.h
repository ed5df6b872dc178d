#pragma once

// Starting a job from what the stable-config store knows (DESIGN.md "Stability and reuse"):
// when a plan comparable with the one the job asks for already ran out of memory for the same
// key, the job starts from the known stable plan instead of paying for the same OOMs again.
//
// "Comparable" is the partial order of memory need, knob by knob (no_heavier): the failed plan
// is at least as heavy as the requested one (the spec's rule: the store saw a plan like this
// one fail), or no heavier (then the requested plan certainly needs as much). Plans that are
// heavier in one knob and lighter in another say nothing about each other and are not used.
//
// The plan a run starts from is never heavier than the job's in any knob (lighter_of): the
// stable plan's downgrades are applied where they are lighter, and the job's own lighter
// choices stay. The effective batch is always the job's.
//
// Plain C++, no torch.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loom/guard/plan.h"
#include "loom/guard/plan_store.h"

namespace loom::guard {

// True when every device-memory knob of `a` needs no more than `b`'s, each in the direction
// Plan::fields gives it (Weighs): checkpointing on or `b`'s off, micro-batch, bucket cap and
// frames no larger, low_vram no lower, and sampling off or no larger (size, frames, batching).
// Host RAM knobs and accumulation do not count.
bool no_heavier(const Plan& a, const Plan& b);

// Per knob of Plan::fields, the lighter of the two; the micro-batch shrinks to `other`'s with
// accumulation raised to keep `requested`'s effective batch (batch 1 when the smaller batch does
// not divide it). Host knobs too: caches on disk when either says so, the fewer threads.
Plan lighter_of(const Plan& requested, const Plan& other);

struct Reuse {
    Plan plan;                        // what the run starts from
    std::int64_t stable_id = 0;       // the store's stable plan it came from
    std::vector<KnobChange> changes;  // from the job's plan, knob by knob
    std::string reason;               // one sentence for the log
};

// The plan to start from, or nullopt when the store knows no failure comparable with
// `requested`, has no stable plan, or its stable plan is not lighter in any knob.
std::optional<Reuse> reuse_stable_plan(const Plan& requested, const KnownPlans& known);

}  // namespace loom::guard
