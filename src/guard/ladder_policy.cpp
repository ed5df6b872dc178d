#include "loom/guard/ladder_policy.h"

#include <algorithm>
#include <functional>

#include "loom/core/byte_size.h"

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

// A candidate rung: the plan it would retry with, or nullopt when it does not apply.
struct Rung {
    const char* rule;
    std::function<std::optional<Plan>()> apply;
    std::string reason;
};

// The sampling ladder, shared by sampling OOMs and the training ladder's sampling rung.
std::vector<Rung> sampling_rungs(const Plan& plan, const OomEvent& event,
                                 const PolicyContext& context) {
    const int floor = sample_floor(event.buckets.smallest_side);
    return {
        {"sample.one_prompt_at_a_time",
         [&]() -> std::optional<Plan> {
             if (!plan.sample.enabled || !plan.sample.batch_prompts || context.prompt_count < 2)
                 return std::nullopt;
             Plan p = plan;
             p.sample.batch_prompts = false;
             return p;
         },
         "previews were generated for all prompts in one batch"},
        {"sample.sequential_guidance",
         [&]() -> std::optional<Plan> {
             if (!plan.sample.enabled || !plan.sample.batch_guidance || !context.guidance)
                 return std::nullopt;
             Plan p = plan;
             p.sample.batch_guidance = false;
             return p;
         },
         "the guided and unguided passes ran as one doubled batch"},
        {"sample.halve_size",
         [&, floor]() -> std::optional<Plan> {
             if (!plan.sample.enabled) return std::nullopt;
             Plan p = plan;
             p.sample.width = halve_sample_side(plan.sample.width, floor);
             p.sample.height = halve_sample_side(plan.sample.height, floor);
             if (p.sample == plan.sample) return std::nullopt;
             return p;
         },
         "the preview size sets the sampling peak (floor " + std::to_string(floor) + " px)"},
        {"sample.fewer_frames",
         [&]() -> std::optional<Plan> {
             if (!plan.sample.enabled || !context.video || plan.sample.frames <= 1)
                 return std::nullopt;
             Plan p = plan;
             p.sample.frames = halve_frames(plan.sample.frames);
             return p;
         },
         "preview frames multiply the sampling peak"},
        {"sample.disable",
         [&]() -> std::optional<Plan> {
             if (!plan.sample.enabled) return std::nullopt;
             Plan p = plan;
             p.sample.enabled = false;
             return p;
         },
         "the smallest preview still does not fit; training continues without previews"},
    };
}

std::optional<Plan> drop_largest_bucket(const Plan& plan, const OomEvent& event) {
    if (event.buckets.active < 2 || !event.buckets.next_cap) return std::nullopt;
    Plan p = plan;
    p.max_bucket_pixels = *event.buckets.next_cap;
    return p;
}

std::optional<Plan> low_vram_next(const Plan& plan, const PolicyContext& context) {
    if (plan.low_vram >= context.low_vram_levels) return std::nullopt;
    Plan p = plan;
    p.low_vram = plan.low_vram + 1;
    return p;
}

std::vector<Rung> training_rungs(const Plan& plan, const OomEvent& event, const History& history,
                                 const PolicyContext& context) {
    const bool from_largest =
        event.bucket && event.buckets.active > 1 &&
        std::int64_t(event.bucket->first) * event.bucket->second >= event.buckets.largest_area;
    bool smaller_trained = false;
    for (std::int64_t area : history.trained_bucket_areas) {
        smaller_trained = smaller_trained || area < event.buckets.largest_area;
    }
    const Rung sometimes{"train.sometimes_largest_bucket",
                         [&, from_largest, smaller_trained]() -> std::optional<Plan> {
                             if (!from_largest || !smaller_trained) return std::nullopt;
                             return drop_largest_bucket(plan, event);
                         },
                         "the failing batch came from the largest bucket and smaller buckets "
                         "have trained fine"};
    const Rung checkpointing{"train.gradient_checkpointing",
                             [&]() -> std::optional<Plan> {
                                 if (plan.gradient_checkpointing) return std::nullopt;
                                 Plan p = plan;
                                 p.gradient_checkpointing = true;
                                 return p;
                             },
                             "activations dominate a training step's memory"};
    const Rung batch_one{"train.batch_1_accumulate",
                         [&]() -> std::optional<Plan> {
                             if (plan.batch_size <= 1) return std::nullopt;
                             Plan p = plan;
                             p.gradient_accumulation = plan.effective_batch();
                             p.batch_size = 1;
                             return p;
                         },
                         "one item per forward pass; gradient accumulation keeps the effective "
                         "batch"};
    const Rung bucket{"train.drop_largest_bucket",
                      [&]() -> std::optional<Plan> { return drop_largest_bucket(plan, event); },
                      "the largest resolution bucket sets the step's peak; its items train one "
                      "size down"};
    // Frames are a video model's largest lever: halved once first (the guide's order), then,
    // after batch, checkpointing and buckets, again down to a single frame.
    const auto fewer_frames = [&](bool first) {
        return Rung{"train.fewer_frames",
                    [&, first]() -> std::optional<Plan> {
                        if (!context.video || plan.frames <= 1) return std::nullopt;
                        if (first && plan.frames < context.job_frames) return std::nullopt;
                        Plan p = plan;
                        p.frames = halve_frames(plan.frames);
                        return p;
                    },
                    "frames are a video model's largest memory lever"};
    };
    // Sampling leaves memory behind (allocator cache, fragmentation) only after it ran.
    std::vector<Rung> sampling;
    if (event.after_sample) {
        for (Rung r : sampling_rungs(plan, event, context)) {
            r.reason = "a sampling pass ran just before this step: " + r.reason;
            sampling.push_back(std::move(r));
        }
    }
    const Rung low_vram{"train.low_vram",
                        [&]() -> std::optional<Plan> { return low_vram_next(plan, context); },
                        "the last rung: keep less of the model on the device"};

    std::vector<Rung> order{sometimes};
    if (context.video) {
        for (const Rung& r :
             {fewer_frames(true), batch_one, checkpointing, bucket, fewer_frames(false)}) {
            order.push_back(r);
        }
    } else {
        for (const Rung& r : {checkpointing, batch_one, bucket}) order.push_back(r);
    }
    order.insert(order.end(), sampling.begin(), sampling.end());
    order.push_back(low_vram);
    return order;
}

bool already_failed(const History& history, Work work, const Plan& plan) {
    return std::any_of(history.failed.begin(), history.failed.end(),
                       [&](const auto& f) { return f.first == work && f.second == plan; });
}

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

Decision retry_with(const Plan& from, const Plan& to, const char* rule, const std::string& why) {
    Decision d;
    d.action = Decision::Action::kRetry;
    d.plan = to;
    d.rule = rule;
    d.reason = why;
    d.changes = diff(from, to);
    return d;
}

// Host RAM: the device knobs cannot help, so the host ladder has its own rungs.
Decision decide_host(const Plan& plan, const OomEvent& event, const PolicyContext& context) {
    if (plan.host.memory_caches) {
        Plan p = plan;
        p.host.memory_caches = false;
        return retry_with(plan, p, "host.caches_to_disk",
                          "host RAM ran out: cached latents and text embeddings move from RAM to "
                          "the disk cache");
    }
    const int threads = plan.host.threads > 0 ? plan.host.threads : context.host_threads;
    if (threads > 1) {
        Plan p = plan;
        p.host.threads = threads / 2;
        return retry_with(plan, p, "host.fewer_threads",
                          "host RAM ran out: fewer CPU threads need fewer per-thread buffers");
    }
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
    if (event.kind == OomKind::kHost) return decide_host(plan, event, context);
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
    std::vector<Rung> rungs;
    switch (event.work) {
        case Work::kSample: rungs = sampling_rungs(plan, event, context); break;
        case Work::kLoad:
        case Work::kCache:
            rungs.push_back({"load.low_vram",
                             [&]() -> std::optional<Plan> { return low_vram_next(plan, context); },
                             "loading and caching run before batches and buckets exist"});
            break;
        case Work::kSave:
            if (history.save_retries == 0) {
                Decision d = retry_with(plan, plan, "save.free_and_retry",
                                        "saving needs little device memory; the cache was "
                                        "emptied, so the save is retried once as it was");
                return d;
            }
            rungs.push_back({"save.low_vram",
                             [&]() -> std::optional<Plan> { return low_vram_next(plan, context); },
                             "the save failed again after freeing memory"});
            break;
        case Work::kTrain: rungs = training_rungs(plan, event, history, context); break;
    }
    for (const Rung& rung : rungs) {
        const std::optional<Plan> next = rung.apply();
        if (!next || *next == plan || already_failed(history, event.work, *next)) continue;
        return retry_with(plan, *next, rung.rule, rung.reason);
    }
    return give_up(plan, event, history, context);
}

}  // namespace loom::guard
