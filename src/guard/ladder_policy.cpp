#include "loom/guard/ladder_policy.h"

#include <algorithm>

#include "ladder_rungs.h"
#include "loom/core/byte_size.h"
#include "loom/guard/plan_reuse.h"

namespace loom::guard {

const char* to_string(Work work) {
    switch (work) {
        case Work::kLoad: return "load";
        case Work::kCache: return "cache";
        case Work::kTrain: return "train";
        case Work::kSample: return "sample";
        case Work::kSave: return "save";
    }
    return "train";
}

const char* kind_name(OomKind kind) {
    switch (kind) {
        case OomKind::kDevice: return "device";
        case OomKind::kLibrary: return "library";
        case OomKind::kHost: return "host";
        case OomKind::kNotOom: return "none";
    }
    return "none";
}

Work work_of(Phase phase) {
    switch (phase) {
        case Phase::kLoad: return Work::kLoad;
        case Phase::kCache: return Work::kCache;
        case Phase::kFirstSample:
        case Phase::kSample: return Work::kSample;
        case Phase::kSave: return Work::kSave;
        case Phase::kNone:
        case Phase::kProbe:
        case Phase::kTrainStep: return Work::kTrain;
    }
    return Work::kTrain;
}

const char* to_string(Decision::Action action) {
    switch (action) {
        case Decision::Action::kRetry: return "retry";
        case Decision::Action::kDoesNotFit: return "does_not_fit";
        case Decision::Action::kWorkerState: return "worker_state";
        case Decision::Action::kHostMemory: return "host_memory";
    }
    return "retry";
}

bool device_looks_dirty(const MemoryStats& m) {
    return m.total > 0 && m.free < m.total / 20;
}

std::uint64_t foreign_bytes(const MemoryStats& m) {
    const std::uint64_t used = m.free + m.reserved;
    return m.total > used ? m.total - used : 0;
}

int halve_sample_side(int side, int floor) {
    const int half = std::max(floor, (side / 2) / 64 * 64);
    return half < side ? half : side;
}

int sample_floor(int smallest_bucket_side) {
    return std::max(8, std::min(256, smallest_bucket_side / 8 * 8));
}

int halve_frames(int frames) {
    return frames <= 1 ? 1 : 4 * ((frames - 1) / 8) + 1;
}

namespace {

std::string memory_figures(const OomEvent& e) {
    std::string s;
    if (e.bytes_requested) s += "tried to allocate " + format_bytes_human(*e.bytes_requested) + " ";
    s += "with " + format_bytes_human(e.memory.peak_allocated) + " in use; after freeing, " +
         format_bytes_human(e.memory.free) + " free of " + format_bytes_human(e.memory.total);
    const std::uint64_t foreign = foreign_bytes(e.memory);
    if (foreign > 0) s += ", " + format_bytes_human(foreign) + " held outside loom";
    return s;
}

Decision give_up(const Plan& plan, const OomEvent& event, const History& history,
                 const PolicyContext& context) {
    Decision d;
    d.plan = plan;
    const bool nothing_trained = history.steps_succeeded == 0;
    const bool held_elsewhere = foreign_bytes(event.memory) > event.memory.total / 4;
    if (nothing_trained && (held_elsewhere || event.kind == OomKind::kLibrary)) {
        d.action = Decision::Action::kWorkerState;
        d.rule = "worker_state.conservative_plan_fails";
        d.reason = "the most conservative plan fails before any step while " +
                   std::string(event.kind == OomKind::kLibrary
                                   ? "a CUDA library cannot allocate its workspace"
                                   : "memory is held outside loom") +
                   " (" + memory_figures(event) + "); start on a fresh worker";
        return d;
    }
    d.action = Decision::Action::kDoesNotFit;
    d.rule = "exhausted";
    d.reason = "every rung of the ladder was tried for " + std::string(to_string(event.work)) +
               " (" + memory_figures(event) + "); the smallest plan tried: " + describe(plan);
    if (context.low_vram_levels == 0) {
        d.reason += "; low_vram, the last rung, is not available in this version of loom";
    }
    return d;
}

Decision retry_with(const Plan& from, const Plan& to, const std::string& rule,
                    const std::string& why) {
    Decision d;
    d.action = Decision::Action::kRetry;
    d.plan = to;
    d.rule = rule;
    d.reason = why;
    d.changes = diff(from, to);
    return d;
}

// The first rung of `branch` that applies, skipping a plan that is unchanged or already failed
// at this work (never the same retry twice), unless the rung says otherwise.
std::optional<Decision> first_rung(LadderBranch branch, const Plan& plan, const OomEvent& event,
                                   const History& history, const PolicyContext& context) {
    const auto attempt = [&](const LadderRow& row,
                             const std::string& why) -> std::optional<Decision> {
        const std::optional<Plan> next = row.candidate(plan, event, history, context);
        if (!next) return std::nullopt;
        if (!row.skips_history && (*next == plan || already_failed(history, event.work, *next))) {
            return std::nullopt;
        }
        return retry_with(plan, *next, row.spec.rule,
                          why + (row.reason_detail ? row.reason_detail(plan, *next, event, context)
                                                   : std::string()));
    };
    for (const LadderRow& row : ladder_rows()) {
        if (row.spec.branch != branch) continue;
        if (row.candidate != nullptr) {
            if (std::optional<Decision> d = attempt(row, row.spec.reason)) return d;
            continue;
        }
        // Sampling leaves memory behind (allocator cache, fragmentation) only after it ran.
        if (!event.after_sample) continue;
        for (const LadderRow& sampling : ladder_rows()) {
            if (sampling.spec.branch != LadderBranch::kSampling) continue;
            if (std::optional<Decision> d =
                    attempt(sampling, row.spec.reason + ": " + sampling.spec.reason)) {
                return d;
            }
        }
    }
    return std::nullopt;
}

// Host RAM with every host rung taken: the device ladder does not apply.
Decision host_exhausted(const Plan& plan, const OomEvent& event) {
    Decision d;
    d.action = Decision::Action::kHostMemory;
    d.plan = plan;
    d.rule = "host.exhausted";
    d.reason = "host RAM ran out with the caches on disk and one CPU thread (" + event.message +
               "); device settings cannot help";
    return d;
}

}  // namespace

Decision decide_after_death(const Plan& plan, const PolicyContext& context) {
    OomEvent e;
    e.phase = Phase::kNone;
    e.kind = OomKind::kHost;
    e.message = "the training process was killed (SIGKILL), as the host's OOM killer does";
    return decide(plan, e, {}, context);
}

Decision decide(const Plan& plan, const OomEvent& event, const History& history,
                const PolicyContext& context) {
    if (event.kind == OomKind::kHost) {
        // Host RAM: the device knobs cannot help, so the host ladder has its own rungs.
        if (std::optional<Decision> d =
                first_rung(LadderBranch::kHost, plan, event, history, context)) {
            return *d;
        }
        return host_exhausted(plan, event);
    }
    // Memory held outside loom while loom itself holds little: no setting of ours frees it.
    if (event.memory.total > 0 && event.memory.free < event.memory.total / 20 &&
        event.memory.allocated < event.memory.total / 4 &&
        foreign_bytes(event.memory) > event.memory.total / 2) {
        Decision d;
        d.action = Decision::Action::kWorkerState;
        d.plan = plan;
        d.rule = "worker_state.memory_held_elsewhere";
        d.reason = "almost nothing is free although loom holds little (" + memory_figures(event) +
                   "); start on a fresh worker";
        return d;
    }
    if (std::optional<Decision> d =
            first_rung(ladder_branch(event, context), plan, event, history, context)) {
        return *d;
    }
    return give_up(plan, event, history, context);
}

bool already_failed(const History& history, Work work, const Plan& plan) {
    return std::any_of(history.failed.begin(), history.failed.end(),
                       [&](const auto& f) { return f.first == work && f.second == plan; });
}

bool measured_rung(std::string_view rule) {
    const RungSpec* spec = find_rung(rule);
    if (spec == nullptr || spec->free ||
        (spec->branch != LadderBranch::kTrainImage && spec->branch != LadderBranch::kTrainVideo)) {
        return false;
    }
    return std::none_of(spec->knobs.begin(), spec->knobs.end(),
                        [](const std::string& k) { return k.rfind("sample.", 0) == 0; });
}

bool reversible_change(const Plan& from, const Plan& to) {
    Plan p = from;
    p.gradient_checkpointing = to.gradient_checkpointing;
    p.batch_size = to.batch_size;
    p.gradient_accumulation = to.gradient_accumulation;
    p.low_vram = to.low_vram;
    p.streamed_blocks = to.streamed_blocks;
    return p == to;
}

std::vector<Plan> measured_candidates(const Plan& base, const Plan& job, const History& history,
                                      const PolicyContext& context, int streamed_blocks) {
    std::vector<bool> checkpointing{job.gradient_checkpointing};
    if (!job.gradient_checkpointing) checkpointing.push_back(true);
    // Micro-batches from the job's (or the plan's, if larger) down to 1, each dividing the
    // effective batch so that accumulation keeps it.
    std::vector<int> batches;
    const int effective = base.effective_batch();
    for (int b = std::max(job.batch_size, base.batch_size); b >= 1; --b) {
        if (effective % b == 0) batches.push_back(b);
    }
    // Every level from the plan's up: a measurement can leave any of them (train/low_vram.h).
    std::vector<int> levels;
    for (int level = base.low_vram; level <= std::max(base.low_vram, context.low_vram_levels);
         ++level) {
        levels.push_back(level);
    }
    std::vector<Plan> out;
    for (const int level : levels) {
        for (const bool gc : checkpointing) {
            for (const int batch : batches) {
                Plan p = base;
                p.gradient_checkpointing = gc;
                p.batch_size = batch;
                p.gradient_accumulation = effective / batch;
                p.low_vram = level;
                if (level < 3) {
                    p.streamed_blocks = 0;
                } else if (base.low_vram < 3) {
                    p.streamed_blocks = streamed_blocks;
                }
                // A plan that needs at least what a failed one needed, knob by knob, fails too.
                const bool doomed =
                    std::any_of(history.failed.begin(), history.failed.end(), [&](const auto& f) {
                        return f.first == Work::kTrain && no_heavier(f.second, p);
                    });
                if (!doomed) out.push_back(p);
            }
        }
    }
    return out;
}

Decision measured_decision(const Plan& from, const Plan& chosen, const OomEvent& event,
                           const History& history, const PolicyContext& context,
                           const std::string& measured) {
    const LadderBranch branch = ladder_branch(event, context);
    for (const LadderRow& row : ladder_rows()) {
        if (row.spec.branch != branch || row.candidate == nullptr) continue;
        const std::optional<Plan> next = row.candidate(from, event, history, context);
        if (next && *next == chosen) {
            return retry_with(from, chosen, row.spec.rule, row.spec.reason + " (" + measured + ")");
        }
    }
    return retry_with(from, chosen, kMeasuredRule,
                      "the fastest plan that fits among those measured (" + measured + ")");
}

LadderBranch ladder_branch(const OomEvent& event, const PolicyContext& context) {
    if (event.kind == OomKind::kHost) return LadderBranch::kHost;
    switch (event.work) {
        case Work::kSample: return LadderBranch::kSampling;
        case Work::kLoad:
        case Work::kCache: return LadderBranch::kLoadCache;
        case Work::kSave: return LadderBranch::kSave;
        case Work::kTrain: break;
    }
    return context.video ? LadderBranch::kTrainVideo : LadderBranch::kTrainImage;
}

}  // namespace loom::guard
