#include "loom/guard/plan_reuse.h"

#include <algorithm>
#include <limits>

namespace loom::guard {

namespace {

std::int64_t cap_or_unlimited(const std::optional<std::int64_t>& cap) {
    return cap.value_or(std::numeric_limits<std::int64_t>::max());
}

// `a` needs no more memory for previews than `b`.
bool sampling_no_heavier(const SamplePlan& a, const SamplePlan& b) {
    if (!a.enabled) return true;
    if (!b.enabled) return false;
    return a.width <= b.width && a.height <= b.height && a.frames <= b.frames &&
           (!a.batch_prompts || b.batch_prompts) && (!a.batch_guidance || b.batch_guidance);
}

int fewer_threads(int a, int b) {
    if (a > 0 && b > 0) return std::min(a, b);
    return std::max(a, b);  // 0 is LibTorch's default (all cores): the other one is fewer
}

}  // namespace

bool no_heavier(const Plan& a, const Plan& b) {
    return (a.gradient_checkpointing || !b.gradient_checkpointing) &&
           a.batch_size <= b.batch_size &&
           cap_or_unlimited(a.max_bucket_pixels) <= cap_or_unlimited(b.max_bucket_pixels) &&
           a.frames <= b.frames && a.low_vram >= b.low_vram &&
           sampling_no_heavier(a.sample, b.sample);
}

Plan lighter_of(const Plan& requested, const Plan& other) {
    Plan p = requested;
    p.gradient_checkpointing = requested.gradient_checkpointing || other.gradient_checkpointing;
    const int effective = requested.effective_batch();
    p.batch_size = std::min(requested.batch_size, other.batch_size);
    if (effective % p.batch_size != 0) p.batch_size = 1;
    p.gradient_accumulation = effective / p.batch_size;
    if (other.max_bucket_pixels) {
        p.max_bucket_pixels =
            std::min(cap_or_unlimited(requested.max_bucket_pixels), *other.max_bucket_pixels);
    }
    p.frames = std::min(requested.frames, other.frames);
    p.low_vram = std::max(requested.low_vram, other.low_vram);
    p.sample.enabled = requested.sample.enabled && other.sample.enabled;
    p.sample.width = std::min(requested.sample.width, other.sample.width);
    p.sample.height = std::min(requested.sample.height, other.sample.height);
    p.sample.frames = std::min(requested.sample.frames, other.sample.frames);
    p.sample.batch_prompts = requested.sample.batch_prompts && other.sample.batch_prompts;
    p.sample.batch_guidance = requested.sample.batch_guidance && other.sample.batch_guidance;
    p.host.memory_caches = requested.host.memory_caches && other.host.memory_caches;
    p.host.threads = fewer_threads(requested.host.threads, other.host.threads);
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
