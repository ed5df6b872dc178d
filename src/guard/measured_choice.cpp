// The guard's measured choice (guard.h; issue 22): with the probe on, a training-step OOM is
// answered by measuring the plans around the documented one that differ only in how a step is
// computed (ladder_policy.h, measured_candidates) and taking the fastest that fits. The
// documented plan is measured first and wins ties, so the guide's order stays the explanation.

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "loom/core/byte_size.h"
#include "loom/guard/guard.h"
#include "loom/guard/log_wording.h"
#include "loom/guard/plan_reuse.h"

namespace loom::guard {

namespace {

// "12.3 ms", "1.24 s".
std::string format_seconds(double seconds) {
    char buf[32];
    if (seconds < 1.0) {
        std::snprintf(buf, sizeof(buf), "%.1f ms", seconds * 1000.0);
    } else {
        std::snprintf(buf, sizeof(buf), "%.2f s", seconds);
    }
    return buf;
}

// Two runs of one micro-batch do not time a plan finer than this (the benchmark's plans moved by
// up to 15% between runs on a busy 2-core host): closer plans are a tie, and a tie goes to the
// plan measured first — the documented one.
constexpr double kTie = 0.90;

// `plan` first, then `others` without it.
std::vector<Plan> preferred_first(const Plan& plan, const std::vector<Plan>& others) {
    std::vector<Plan> out{plan};
    for (const Plan& p : others) {
        if (p != plan) out.push_back(p);
    }
    return out;
}

}  // namespace

std::uint64_t Guard::measure_limit() const {
    const std::uint64_t total = device_.stats().total;
    return static_cast<std::uint64_t>(double(total) * (1.0 - options_.measure_headroom));
}

std::optional<int> Guard::measure_candidates(const std::vector<Plan>& candidates,
                                             const std::string& after, std::string& figures) {
    const std::uint64_t total = device_.stats().total;
    const std::uint64_t limit = measure_limit();
    std::vector<std::optional<Measurement>> measured(candidates.size());
    std::vector<Plan> too_big;  // measured not to fit: what needs as much is skipped
    int best = -1;
    std::string clock = "wall";
    for (std::size_t i = 0; i < candidates.size(); ++i) {
        const Plan& c = candidates[i];
        if (std::any_of(too_big.begin(), too_big.end(),
                        [&](const Plan& big) { return no_heavier(big, c); })) {
            continue;
        }
        // A higher low_vram level adds dequantization or copies to every step; what it mostly buys
        // back is the micro-batch. Once a plan at the job's micro-batch fits at level L, only level
        // L+1 at the job's micro-batch is still measured (quantizing or streaming can also buy back
        // checkpointing's recompute) and nothing above: this bounds the probe's start-up
        // (docs/BENCHMARKS.md measured the rules).
        if (best >= 0 && candidates[best].batch_size >= job_plan_.batch_size) {
            const int level = candidates[best].low_vram;
            const bool next_at_job_batch =
                c.low_vram == level + 1 && c.batch_size >= job_plan_.batch_size;
            if (c.low_vram > level && !next_at_job_batch) continue;
        }
        const std::optional<Measurement> m = target_->measure(plan_, c);
        if (!m) return std::nullopt;
        // The preferred plan is what the documented order would run anyway: it needs only to
        // run. Leaving that order for another plan takes the headroom as evidence.
        const bool fits = m->fits && (total == 0 || m->peak <= (i == 0 ? total : limit));
        if (!fits) too_big.push_back(c);
        events_.record("measure", {{"after", after},
                                   {"fits", fits},
                                   {"out_of_memory", !m->fits},
                                   {"peak", m->peak},
                                   {"limit", limit},
                                   {"step_seconds", m->step_seconds},
                                   {"clock", m->clock},
                                   {"plan", describe(c)}});
        if (!figures.empty()) figures += "; ";
        figures += describe(c) + ": " +
                   (!m->fits ? std::string("out of memory")
                             : format_seconds(m->step_seconds) + "/step, peak " +
                                   format_bytes_human(m->peak) + (fits ? "" : " (no headroom)"));
        measured[i] = m;
        clock = m->clock;
        if (fits && (best < 0 || m->step_seconds < measured[best]->step_seconds * kTie)) {
            best = static_cast<int>(i);
        }
    }
    // A modelled clock's figures are not seconds anyone waited: say so where they are read.
    if (clock != "wall") figures += " (times by " + clock + ")";
    return best;
}

Decision Guard::measured_choice(const Decision& documented, const OomEvent& event) {
    const std::vector<Plan> candidates = preferred_first(
        documented.plan, measured_candidates(plan_, job_plan_, history_, options_.context,
                                             documented.plan.streaming_count()));
    if (candidates.size() < 2) return documented;
    std::string figures;
    const std::optional<int> best = measure_candidates(candidates, documented.rule, figures);
    if (!best || *best < 0) return documented;  // none fits: the documented order, unmeasured
    const Plan& chosen = candidates[*best];
    const std::string text = "measured: " + figures + "; the fastest that fits";
    Decision d = documented;
    if (*best == 0) {
        d.reason += " (" + text + ")";
    } else {
        d = measured_decision(plan_, chosen, event, history_, options_.context, text);
    }
    events_.record("measured_choice", {{"rule", d.rule},
                                       {"documented", documented.rule},
                                       {"candidates", static_cast<std::int64_t>(candidates.size())},
                                       {"plan", describe(chosen)}});
    return d;
}

void Guard::measure_after(const Decision& taken, const OomEvent& event) {
    const std::vector<Plan> candidates = preferred_first(
        plan_,
        measured_candidates(plan_, job_plan_, history_, options_.context, plan_.streaming_count()));
    if (candidates.size() < 2) return;
    std::string figures;
    const std::optional<int> best = measure_candidates(candidates, taken.rule, figures);
    if (!best) return;
    const bool change = *best > 0;
    events_.record("measured_choice", {{"rule", change ? std::string(kMeasuredRule) : taken.rule},
                                       {"documented", taken.rule},
                                       {"candidates", static_cast<std::int64_t>(candidates.size())},
                                       {"plan", describe(change ? candidates[*best] : plan_)}});
    if (!change) return;  // the plan as it is: the fastest, or nothing fits (the ladder goes on)
    Decision d = measured_decision(plan_, candidates[*best], event, history_, options_.context,
                                   "after " + taken.rule + ", measured: " + figures);
    events_.decision(d, event);
    apply(d);
}

}  // namespace loom::guard
