#pragma once

// The ladder's rungs inside the guard layer: for each, its row of the documented table
// (RungSpec) and the plan it would retry with. ladder_rungs.cpp holds them (what each rung
// changes), ladder_policy.cpp picks among them (which rung an OOM takes, or a give-up).

#include <optional>
#include <string>
#include <vector>

#include "loom/guard/ladder_policy.h"

namespace loom::guard {

// What a rung would retry with (nullopt: it does not apply).
using Candidate = std::optional<Plan> (*)(const Plan&, const OomEvent&, const History&,
                                          const PolicyContext&);

struct LadderRow {
    RungSpec spec;
    Candidate candidate = nullptr;  // nullptr: the sampling branch's rows (kSamplingRungsRule)
    // What the reason adds for this change (sample.halve_size: the floor; the streaming rungs: how
    // many blocks, and the bytes they free against the shortfall).
    std::string (*reason_detail)(const Plan& from, const Plan& to, const OomEvent&,
                                 const PolicyContext&) = nullptr;
    // Taken as soon as it applies, even with the plan unchanged or already seen failing: a save
    // retried as it was, and the host ladder (its knobs are not the device ladder's).
    bool skips_history = false;
};

// The ladder (DESIGN.md "Recovery specification"; ladder_policy.h's summary), branch by branch,
// in the order the rungs are tried.
const std::vector<LadderRow>& ladder_rows();

}  // namespace loom::guard
