#include "loom/guard/ladder_policy.h"

#include <algorithm>

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

// ---------------------------------------------------------------------------------------------
// The rungs: what each one would retry with (nullopt: it does not apply), and its row.

using Candidate = std::optional<Plan> (*)(const Plan&, const OomEvent&, const History&,
                                          const PolicyContext&);

struct Row {
    RungSpec spec;
    Candidate candidate = nullptr;  // nullptr: the sampling branch's rows (kSamplingRungsRule)
    // What the reason adds for this event (sample.halve_size: the floor).
    std::string (*reason_detail)(const OomEvent&) = nullptr;
    // Taken as soon as it applies, even with the plan unchanged or already seen failing: a save
    // retried as it was, and the host ladder (its knobs are not the device ladder's).
    bool skips_history = false;
};

std::optional<Plan> one_prompt_at_a_time(const Plan& plan, const OomEvent&, const History&,
                                         const PolicyContext& context) {
    if (!plan.sample.enabled || !plan.sample.batch_prompts || context.prompt_count < 2)
        return std::nullopt;
    Plan p = plan;
    p.sample.batch_prompts = false;
    return p;
}

std::optional<Plan> sequential_guidance(const Plan& plan, const OomEvent&, const History&,
                                        const PolicyContext& context) {
    if (!plan.sample.enabled || !plan.sample.batch_guidance || !context.guidance)
        return std::nullopt;
    Plan p = plan;
    p.sample.batch_guidance = false;
    return p;
}

std::optional<Plan> halve_sample_size(const Plan& plan, const OomEvent& event, const History&,
                                      const PolicyContext&) {
    if (!plan.sample.enabled) return std::nullopt;
    const int floor = sample_floor(event.buckets.smallest_side);
    Plan p = plan;
    p.sample.width = halve_sample_side(plan.sample.width, floor);
    p.sample.height = halve_sample_side(plan.sample.height, floor);
    if (p.sample == plan.sample) return std::nullopt;
    return p;
}

std::string sample_floor_detail(const OomEvent& event) {
    return " (floor " + std::to_string(sample_floor(event.buckets.smallest_side)) + " px)";
}

std::optional<Plan> fewer_sample_frames(const Plan& plan, const OomEvent&, const History&,
                                        const PolicyContext& context) {
    if (!plan.sample.enabled || !context.video || plan.sample.frames <= 1) return std::nullopt;
    Plan p = plan;
    p.sample.frames = halve_frames(plan.sample.frames);
    return p;
}

std::optional<Plan> disable_sampling(const Plan& plan, const OomEvent&, const History&,
                                     const PolicyContext&) {
    if (!plan.sample.enabled) return std::nullopt;
    Plan p = plan;
    p.sample.enabled = false;
    return p;
}

// The free rung: with every latent and text embedding cached the encoders only wait for the next
// preview, so sending them to the host (low_vram level 1) costs nothing per step.
std::optional<Plan> encoders_off_device(const Plan& plan, const OomEvent&, const History&,
                                        const PolicyContext& context) {
    if (!context.encoders_idle || plan.low_vram != 0 || context.low_vram_levels < 1) {
        return std::nullopt;
    }
    Plan p = plan;
    p.low_vram = 1;
    return p;
}

std::optional<Plan> low_vram_next(const Plan& plan, const OomEvent&, const History&,
                                  const PolicyContext& context) {
    if (plan.low_vram >= context.low_vram_levels) return std::nullopt;
    Plan p = plan;
    p.low_vram = plan.low_vram + 1;
    return p;
}

std::optional<Plan> drop_largest_bucket(const Plan& plan, const OomEvent& event, const History&,
                                        const PolicyContext&) {
    if (event.buckets.active < 2 || !event.buckets.next_cap) return std::nullopt;
    Plan p = plan;
    p.max_bucket_pixels = *event.buckets.next_cap;
    return p;
}

// "Sometimes": the failing batch came from the largest bucket and smaller ones trained fine.
std::optional<Plan> sometimes_largest_bucket(const Plan& plan, const OomEvent& event,
                                             const History& history, const PolicyContext& context) {
    const bool from_largest =
        event.bucket && event.buckets.active > 1 &&
        std::int64_t(event.bucket->first) * event.bucket->second >= event.buckets.largest_area;
    bool smaller_trained = false;
    for (std::int64_t area : history.trained_bucket_areas) {
        smaller_trained = smaller_trained || area < event.buckets.largest_area;
    }
    if (!from_largest || !smaller_trained) return std::nullopt;
    return drop_largest_bucket(plan, event, history, context);
}

std::optional<Plan> gradient_checkpointing(const Plan& plan, const OomEvent&, const History&,
                                           const PolicyContext&) {
    if (plan.gradient_checkpointing) return std::nullopt;
    Plan p = plan;
    p.gradient_checkpointing = true;
    return p;
}

std::optional<Plan> batch_one(const Plan& plan, const OomEvent&, const History&,
                              const PolicyContext&) {
    if (plan.batch_size <= 1) return std::nullopt;
    Plan p = plan;
    p.gradient_accumulation = plan.effective_batch();
    p.batch_size = 1;
    return p;
}

// Halves the frames the clips have now: the cap, or the longest clip when all are shorter.
std::optional<Plan> fewer_frames_again(const Plan& plan, const OomEvent& event, const History&,
                                       const PolicyContext& context) {
    const int frames = std::min(plan.frames, event.buckets.longest_clip.value_or(plan.frames));
    if (!context.video || frames <= 1) return std::nullopt;
    Plan p = plan;
    p.frames = halve_frames(frames);
    return p;
}

// The first halving applies only while the clip is still as long as the job asked.
std::optional<Plan> fewer_frames_first(const Plan& plan, const OomEvent& event,
                                       const History& history, const PolicyContext& context) {
    if (plan.frames < context.job_frames) return std::nullopt;
    return fewer_frames_again(plan, event, history, context);
}

std::optional<Plan> save_as_is(const Plan& plan, const OomEvent&, const History& history,
                               const PolicyContext&) {
    if (history.save_retries != 0) return std::nullopt;
    return plan;
}

std::optional<Plan> caches_to_disk(const Plan& plan, const OomEvent&, const History&,
                                   const PolicyContext&) {
    if (!plan.host.memory_caches) return std::nullopt;
    Plan p = plan;
    p.host.memory_caches = false;
    return p;
}

std::optional<Plan> fewer_threads(const Plan& plan, const OomEvent&, const History&,
                                  const PolicyContext& context) {
    const int threads = plan.host.threads > 0 ? plan.host.threads : context.host_threads;
    if (threads <= 1) return std::nullopt;
    Plan p = plan;
    p.host.threads = threads / 2;
    return p;
}

// The advice texts several rows share (a rung of two branches says the same thing in both).
const char* const kLowVramAdvice =
    "use the model's low-memory path: `model.low_vram: true` (with the quantization / "
    "text-encoder settings the model's guide gives)";
const char* const kLowVramFlags =
    "use the model's low-memory path (sd-scripts: `--lowram`, `--blocks_to_swap`, `--fp8_base`)";
const char* const kBucketAdvice = "drop the largest resolution bucket from `datasets[].resolution`";
const char* const kBucketFlags =
    "drop the largest resolution (`--resolution`, or the largest bucket of the dataset config)";
const char* const kSampleSizeAdvice =
    "lower `sample.width` / `sample.height` / `sample.sample_steps`";
const char* const kSampleSizeFlags =
    "smaller previews (the sample prompts' `--w`/`--h`/`--s`, or the validation size and steps)";
const char* const kNoSamplingAdvice = "`train.disable_sampling: true`";
const char* const kNoSamplingFlags =
    "no sampling during training (drop `--sample_prompts` / `--validation_prompt`)";

// The ladder (DESIGN.md "Recovery specification"; the header's summary), branch by branch.
std::vector<Row> build_rows() {
    using B = LadderBranch;
    const Row encoders_off{
        {"free.encoders_off_device",
         B::kTrainImage,
         {"model.low_vram"},
         "latents are cached and captions repeat, so with the text embeddings cached too the "
         "text encoder and the VAE sit idle on the device; on the host they cost no step time",
         "cache latents and text embeddings (`datasets[].cache_latents`, "
         "`cache_text_embeddings`) and keep the encoders off the device "
         "(`model.low_vram: true`)",
         "cache latents and text-encoder outputs (`--cache_latents`, "
         "`--cache_text_encoder_outputs`) so the encoders can leave the GPU",
         /*free=*/true},
        encoders_off_device};
    const Row sometimes{{"train.sometimes_largest_bucket",
                         B::kTrainImage,
                         {"datasets.max_bucket_pixels"},
                         "the failing batch came from the largest bucket and smaller buckets have "
                         "trained fine",
                         kBucketAdvice,
                         kBucketFlags},
                        sometimes_largest_bucket};
    const Row checkpointing{{"train.gradient_checkpointing",
                             B::kTrainImage,
                             {"train.gradient_checkpointing"},
                             "activations dominate a training step's memory",
                             "set `train.gradient_checkpointing: true`",
                             "turn on gradient checkpointing (`--gradient_checkpointing`)"},
                            gradient_checkpointing};
    const Row batch{{"train.batch_1_accumulate",
                     B::kTrainImage,
                     {"train.batch_size", "train.gradient_accumulation"},
                     "one item per forward pass; gradient accumulation keeps the effective batch",
                     "batch size 1 (`train.batch_size: 1`; raise `train.gradient_accumulation` to "
                     "keep the effective batch)",
                     "batch size 1 (`--train_batch_size=1`; raise `--gradient_accumulation_steps` "
                     "to keep the effective batch)"},
                    batch_one};
    const Row bucket{{"train.drop_largest_bucket",
                      B::kTrainImage,
                      {"datasets.max_bucket_pixels"},
                      "the largest resolution bucket sets the step's peak; its items train one "
                      "size down",
                      kBucketAdvice,
                      kBucketFlags},
                     drop_largest_bucket};
    const Row sampling{{kSamplingRungsRule,
                        B::kTrainImage,
                        {"sample.batch_prompts", "sample.batch_guidance", "sample.width",
                         "sample.height", "sample.num_frames", "sample.enabled"},
                        "a sampling pass ran just before this step",
                        std::string("shrink or disable sampling: ") + kSampleSizeAdvice + ", or " +
                            kNoSamplingAdvice,
                        std::string("shrink or disable sampling: ") + kSampleSizeFlags + ", or " +
                            kNoSamplingFlags}};
    const Row low_vram{{"train.low_vram",
                        B::kTrainImage,
                        {"model.low_vram"},
                        "the last rung: keep less of the model on the device",
                        kLowVramAdvice,
                        kLowVramFlags},
                       low_vram_next};
    const RungSpec frames{"train.fewer_frames",
                          B::kTrainVideo,
                          {"datasets.num_frames"},
                          "frames are a video model's largest memory lever",
                          "use fewer frames: `datasets[].num_frames` (and `sample.num_frames`)",
                          "use fewer frames per clip"};
    const auto in = [](B branch, Row row) {
        row.spec.branch = branch;
        return row;
    };

    std::vector<Row> rows = {
        {{"sample.one_prompt_at_a_time",
          B::kSampling,
          {"sample.batch_prompts"},
          "previews were generated for all prompts in one batch",
          "previews one prompt at a time (`oom.sample_batch_prompts: false`)",
          "previews one prompt at a time"},
         one_prompt_at_a_time},
        {{"sample.sequential_guidance",
          B::kSampling,
          {"sample.batch_guidance"},
          "the guided and unguided passes ran as one doubled batch",
          "guidance passes one after the other (`oom.sample_batch_guidance: false`)",
          "guidance passes one after the other"},
         sequential_guidance},
        {{"sample.halve_size",
          B::kSampling,
          {"sample.width", "sample.height"},
          "the preview size sets the sampling peak",
          kSampleSizeAdvice,
          kSampleSizeFlags},
         halve_sample_size,
         sample_floor_detail},
        {{"sample.fewer_frames",
          B::kSampling,
          {"sample.num_frames"},
          "preview frames multiply the sampling peak",
          "fewer preview frames (`sample.num_frames`)",
          "fewer preview frames"},
         fewer_sample_frames},
        {{"sample.disable",
          B::kSampling,
          {"sample.enabled"},
          "the smallest preview still does not fit; training continues without previews",
          kNoSamplingAdvice,
          kNoSamplingFlags},
         disable_sampling},
        {{"load.low_vram",
          B::kLoadCache,
          {"model.low_vram"},
          "loading and caching run before batches and buckets exist",
          kLowVramAdvice,
          kLowVramFlags},
         low_vram_next},
        encoders_off,
        sometimes,
        checkpointing,
        batch,
        bucket,
        sampling,
        low_vram,
        // Frames are a video model's largest lever: halved once first (the guide's order), then,
        // after batch, checkpointing and buckets, again down to a single frame.
        in(B::kTrainVideo, encoders_off),
        in(B::kTrainVideo, sometimes),
        {frames, fewer_frames_first},
        in(B::kTrainVideo, batch),
        in(B::kTrainVideo, checkpointing),
        in(B::kTrainVideo, bucket),
        {frames, fewer_frames_again},
        in(B::kTrainVideo, sampling),
        in(B::kTrainVideo, low_vram),
        {{"save.free_and_retry",
          B::kSave,
          {},
          "saving needs little device memory; the cache was emptied, so the save is retried once "
          "as it was",
          "nothing to change: loom frees the device cache and saves again",
          "free device memory before saving"},
         save_as_is,
         nullptr,
         true},
        {{"save.low_vram",
          B::kSave,
          {"model.low_vram"},
          "the save failed again after freeing memory",
          kLowVramAdvice,
          kLowVramFlags},
         low_vram_next},
        {{"host.caches_to_disk",
          B::kHost,
          {"host.memory_caches"},
          "host RAM ran out: cached latents and text embeddings move from RAM to the disk cache",
          "cache latents on disk (`datasets[].cache_latents_to_disk: true`)",
          "cache latents on disk (`--cache_latents_to_disk`)"},
         caches_to_disk,
         nullptr,
         true},
        {{"host.fewer_threads",
          B::kHost,
          {"host.threads"},
          "host RAM ran out: fewer CPU threads need fewer per-thread buffers",
          "fewer CPU threads (`oom.host_threads`)",
          "fewer CPU threads (`OMP_NUM_THREADS`)"},
         fewer_threads,
         nullptr,
         true},
    };
    return rows;
}

const std::vector<Row>& rows() {
    static const std::vector<Row> kRows = build_rows();
    return kRows;
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
    const auto attempt = [&](const Row& row, const std::string& why) -> std::optional<Decision> {
        const std::optional<Plan> next = row.candidate(plan, event, history, context);
        if (!next) return std::nullopt;
        if (!row.skips_history && (*next == plan || already_failed(history, event.work, *next))) {
            return std::nullopt;
        }
        return retry_with(plan, *next, row.spec.rule,
                          why + (row.reason_detail ? row.reason_detail(event) : std::string()));
    };
    for (const Row& row : rows()) {
        if (row.spec.branch != branch) continue;
        if (row.candidate != nullptr) {
            if (std::optional<Decision> d = attempt(row, row.spec.reason)) return d;
            continue;
        }
        // Sampling leaves memory behind (allocator cache, fragmentation) only after it ran.
        if (!event.after_sample) continue;
        for (const Row& sampling : rows()) {
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
    return p == to;
}

std::vector<Plan> measured_candidates(const Plan& base, const Plan& job, const History& history,
                                      const PolicyContext& context) {
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
    for (const Row& row : rows()) {
        if (row.spec.branch != branch || row.candidate == nullptr) continue;
        const std::optional<Plan> next = row.candidate(from, event, history, context);
        if (next && *next == chosen) {
            return retry_with(from, chosen, row.spec.rule, row.spec.reason + " (" + measured + ")");
        }
    }
    return retry_with(from, chosen, kMeasuredRule,
                      "the fastest plan that fits among those measured (" + measured + ")");
}

const char* to_string(LadderBranch branch) {
    switch (branch) {
        case LadderBranch::kSampling: return "sampling";
        case LadderBranch::kLoadCache: return "load_cache";
        case LadderBranch::kTrainImage: return "train_image";
        case LadderBranch::kTrainVideo: return "train_video";
        case LadderBranch::kSave: return "save";
        case LadderBranch::kHost: return "host";
    }
    return "train_image";
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

const std::vector<RungSpec>& rung_table() {
    static const std::vector<RungSpec> kTable = [] {
        std::vector<RungSpec> table;
        for (const Row& row : rows()) table.push_back(row.spec);
        return table;
    }();
    return kTable;
}

std::vector<const RungSpec*> rungs_of(LadderBranch branch) {
    std::vector<const RungSpec*> out;
    for (const RungSpec& rung : rung_table()) {
        if (rung.branch == branch) out.push_back(&rung);
    }
    return out;
}

const RungSpec* find_rung(std::string_view rule) {
    for (const RungSpec& rung : rung_table()) {
        if (rung.rule == rule) return &rung;
    }
    return nullptr;
}

}  // namespace loom::guard
