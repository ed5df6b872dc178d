#include "loom/guard/plan_reuse.h"

#include <algorithm>
#include <limits>
#include <type_traits>

namespace loom::guard {

namespace {

// A knob's value on its memory scale (Plan::fields says which way it weighs): false < true, and
// no cap (an unset optional, or 0 threads with ZeroIsUnlimited) is the largest of all.
template <class T>
std::int64_t scale(const Knob& knob, const T& value) {
    constexpr std::int64_t kUnlimited = std::numeric_limits<std::int64_t>::max();
    if constexpr (std::is_same_v<T, bool>) {
        return value ? 1 : 0;
    } else if constexpr (std::is_same_v<T, std::optional<std::int64_t>>) {
        return value.value_or(kUnlimited);
    } else if constexpr (std::is_same_v<T, config::QType>) {
        return config::bits_of(value);
    } else if constexpr (std::is_same_v<T, std::optional<config::QType>>) {
        return value ? config::bits_of(*value) : 16;  // unquantized encoders: bf16
    } else {
        static_assert(std::is_same_v<T, int>, "a knob type plan reuse cannot order");
        return knob.zero_is_unlimited && value == 0 ? kUnlimited : value;
    }
}

// The plan as the memory order reads it: below low_vram 3 no block streams, which weighs more
// than any count streaming (whose 0, every block, weighs least).
Plan ordered(Plan p) {
    if (p.low_vram < 3) p.streamed_blocks = -1;
    return p;
}

}  // namespace

bool no_heavier(const Plan& plan_a, const Plan& plan_b) {
    const Plan a = ordered(plan_a);
    const Plan b = ordered(plan_b);
    bool lighter = true;
    const PlanSection* switched_off = nullptr;  // off in `a`: its other knobs need no memory
    for_each_knob([&](const Knob& knob, const auto& field) {
        if (knob.section == switched_off) return;
        const std::int64_t x = scale(knob, field.of(a));
        const std::int64_t y = scale(knob, field.of(b));
        switch (knob.weighs) {
            case Weighs::kMoreDevice: lighter = lighter && x <= y; break;
            case Weighs::kLessDevice: lighter = lighter && x >= y; break;
            case Weighs::kMoreHost:
            case Weighs::kNothing: break;  // not device memory
        }
        if (knob.switches_section && x == 0) switched_off = knob.section;
    });
    return lighter;
}

Plan lighter_of(const Plan& requested_plan, const Plan& other_plan) {
    const Plan requested = ordered(requested_plan);
    const Plan other = ordered(other_plan);
    Plan p = requested;
    for_each_knob([&](const Knob& knob, const auto& field) {
        const std::int64_t r = scale(knob, field.of(requested));
        const std::int64_t o = scale(knob, field.of(other));
        bool take_other = false;
        switch (knob.weighs) {
            case Weighs::kMoreDevice:
            case Weighs::kMoreHost: take_other = o < r; break;
            case Weighs::kLessDevice: take_other = o > r; break;
            case Weighs::kNothing: break;  // accumulation: set below
        }
        if (take_other) field.of(p) = field.of(other);
    });
    // The job's effective batch with the smaller micro-batch: batch 1 when it does not divide.
    const int effective = requested.effective_batch();
    if (effective % p.batch_size != 0) p.batch_size = 1;
    p.gradient_accumulation = effective / p.batch_size;
    if (p.low_vram < 3) p.streamed_blocks = 0;
    return p;
}

std::optional<Reuse> reuse_stable_plan(const Plan& requested, const KnownPlans& known) {
    if (!known.stable) return std::nullopt;
    const auto heavier_failed =
        std::find_if(known.failed.begin(), known.failed.end(),
                     [&](const Plan& f) { return no_heavier(requested, f); });
    const auto lighter_failed =
        std::find_if(known.failed.begin(), known.failed.end(),
                     [&](const Plan& f) { return no_heavier(f, requested); });
    if (heavier_failed == known.failed.end() && lighter_failed == known.failed.end()) {
        return std::nullopt;
    }
    Reuse r;
    r.plan = lighter_of(requested, known.stable->plan);
    if (r.plan == requested) return std::nullopt;
    r.stable_id = known.stable->id;
    r.changes = diff(requested, r.plan);
    const bool same =
        heavier_failed != known.failed.end() && no_heavier(*heavier_failed, requested);
    r.reason = std::string("the store recorded that ") +
               (same                                   ? "this plan"
                : heavier_failed != known.failed.end() ? "a plan at least as heavy as this one"
                                                       : "a lighter plan than this one") +
               " ran out of memory with this model on this device; starting from stable plan #" +
               std::to_string(known.stable->id) + " (run " + known.stable->run_name + ", " +
               known.stable->time + ")";
    return r;
}

}  // namespace loom::guard
