#pragma once

// The vocabulary of `Plan::fields()` (plan.h): the one list that names every memory knob once,
// with its plan.yaml section and key, where it lives in the plan and the rules it carries.
// Equality, diff, undo_change, plan.yaml (written and read), the job's oom keys (plan_from_job,
// job_with_plan) and the memory order of plan reuse (plan_reuse.h) all walk that list, so a knob
// cannot be written but not read, or compared but not restored.
//
// Plain C++, no torch, no YAML.

#include <string>

#include "loom/config/job.h"

namespace loom::guard {

// A plan.yaml section. The knobs of one section are listed together, in the file's order.
struct PlanSection {
    const char* name;
    // Plans written before the section existed lack it; its knobs then keep their defaults.
    bool may_be_absent = false;
};

// Which way a knob weighs on memory: how plan reuse orders two plans (no_heavier) and takes the
// lighter of them (lighter_of). For a bool, true is the larger value; for an optional cap, none
// (no cap) is the largest.
enum class Weighs {
    kMoreDevice,  // a larger value needs more device memory (micro-batch, frames, sample size)
    kLessDevice,  // a larger value needs less device memory (checkpointing, the low_vram level)
    kMoreHost,  // host RAM, not device memory: lighter_of takes the smaller, no_heavier ignores it
    kNothing,   // no memory of its own (accumulation: the micro-batch is what weighs)
};

// Rules a list entry may carry after its Weighs.

// The smallest value plan.yaml accepts for an integer knob.
struct AtLeast {
    int min;
};

// Part of the effective batch (micro-batch x accumulation), which plan changes keep: undo_change
// restores these knobs together, and lighter_of recomputes accumulation from the micro-batch.
struct EffectiveBatch {};

// A bool that switches its whole section off: while false, the section's other knobs need no
// memory. It is the first knob of its section.
struct SwitchesSection {};

// For an integer knob, 0 means no limit (threads: LibTorch's default, all cores; streamed
// blocks: every block), which is the largest value in the memory order.
struct ZeroIsUnlimited {};

// A knob added after plan.yaml files were written: a file without it keeps the plan's default
// (the model section's qtypes, issue 21: such a file held the base in bf16 at level 2, and
// reads as level 2's default, qfloat8).
struct AbsentInOlderPlans {};

// The key of the job's `oom:` block that states this knob where ai-toolkit has none:
// plan_from_job reads it and job_with_plan writes it.
template <class T>
struct OomKey {
    constexpr explicit OomKey(T config::OomConfig::*m) : member(m) {}
    T config::OomConfig::*member;
};

// One knob as every walker of the list sees it (its value's type and place are in the field
// object that comes with it, see for_each_knob in plan.h).
struct Knob {
    const PlanSection* section = nullptr;
    const char* key = "";
    Weighs weighs = Weighs::kNothing;
    bool has_floor = false;  // AtLeast given
    int at_least = 0;
    bool effective_batch = false;
    bool switches_section = false;
    bool zero_is_unlimited = false;
    bool may_be_absent = false;  // AbsentInOlderPlans given

    // "section.key": what diff, the WARN lines and the events call the knob.
    std::string name() const { return std::string(section->name) + "." + key; }
};

// Where a knob's value lives: `plan.*member` (KnobAt) or `plan.*group.*member` (KnobIn, the
// sample and host knobs, which SamplePlan and HostPlan group); `oom` is its OomKey or null.
// `Group` is the struct that holds the member.
template <class P, class T>
struct KnobAt {
    using Value = T;
    using Group = P;
    T P::*member;
    T config::OomConfig::*oom = nullptr;

    constexpr T& of(P& p) const { return p.*member; }
    constexpr const T& of(const P& p) const { return p.*member; }
};

template <class P, class G, class T>
struct KnobIn {
    using Value = T;
    using Group = G;
    G P::*group;
    T G::*member;
    T config::OomConfig::*oom = nullptr;

    constexpr T& of(P& p) const { return (p.*group).*member; }
    constexpr const T& of(const P& p) const { return (p.*group).*member; }
    constexpr T& of(G& g) const { return g.*member; }
    constexpr const T& of(const G& g) const { return g.*member; }
};

// `in(&Plan::sample, &SamplePlan::width)`: a knob inside one of the plan's groups.
template <class P, class G, class T>
constexpr KnobIn<P, G, T> in(G P::*group, T G::*member) {
    return {group, member};
}

}  // namespace loom::guard
