#include "ladder_rungs.h"

#include <algorithm>

#include "loom/core/byte_size.h"
#include "loom/guard/plan_reuse.h"

namespace loom::guard {

namespace {

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

std::string sample_floor_detail(const Plan&, const Plan&, const OomEvent& event,
                                const PolicyContext&) {
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

// The first free rung of a model of experts: a step computes with one expert, so the others wait
// on the host and come to the device only when their timesteps do (an expert's turn, a preview).
std::optional<Plan> idle_expert_to_host(const Plan& plan, const OomEvent&, const History&,
                                        const PolicyContext& context) {
    if (context.experts < 2 || plan.idle_expert_on_host) return std::nullopt;
    Plan p = plan;
    p.idle_expert_on_host = true;
    return p;
}

// What the failed attempt lacked: the memory in use when it failed plus the allocation that
// failed, beyond the device's capacity, and at least that allocation; nullopt when the error did
// not say how much it asked for.
std::optional<std::uint64_t> shortfall(const OomEvent& event) {
    if (!event.bytes_requested || event.memory.total == 0) return std::nullopt;
    const std::uint64_t wanted = event.memory.peak_allocated + *event.bytes_requested;
    const std::uint64_t over = wanted > event.memory.total ? wanted - event.memory.total : 0;
    return std::max(over, *event.bytes_requested);
}

// The count that streams the `streaming` blocks already streamed and as many more, in the
// context's streaming order, as free `need` bytes (at least one more); 0 when that is every block.
int blocks_freeing(int streaming, std::uint64_t need, const PolicyContext& context) {
    const int blocks = static_cast<int>(context.block_bytes.size());
    std::uint64_t freed = 0;
    int n = streaming;
    while (n < blocks && freed < need) freed += context.block_bytes[n++];
    n = std::max(n, streaming + 1);
    return n >= blocks ? 0 : n;
}

// Level 3 streams the fewest blocks that cover the shortfall and what streaming itself adds to a
// step (the fetched copies in flight); every block when the blocks or the shortfall are unknown;
// one after the cache phase.
std::optional<Plan> low_vram_next(const Plan& plan, const OomEvent& event, const History&,
                                  const PolicyContext& context) {
    if (plan.low_vram >= context.low_vram_levels) return std::nullopt;
    Plan p = plan;
    p.low_vram = plan.low_vram + 1;
    p.streamed_blocks = 0;
    const std::optional<std::uint64_t> lacking = shortfall(event);
    if (p.low_vram != 3 || context.block_bytes.empty()) return p;
    if (event.work == Work::kCache) {
        // What the cache phase lacked was room for the encoders, which compute on the host at
        // level 3: one block streams, and a step that needs more streams more (the probe's first).
        p.streamed_blocks = context.block_bytes.size() > 1 ? 1 : 0;
    } else if (lacking) {
        p.streamed_blocks = blocks_freeing(0, *lacking + context.stream_overhead, context);
    }
    return p;
}

// At level 3 with blocks still on the device: the fewest more that cover the new shortfall (twice
// as many without one, or every block when the blocks are unknown).
std::optional<Plan> more_streamed_blocks(const Plan& plan, const OomEvent& event, const History&,
                                         const PolicyContext& context) {
    if (plan.low_vram < 3 || plan.streamed_blocks == 0) return std::nullopt;
    const int blocks = static_cast<int>(context.block_bytes.size());
    Plan p = plan;
    p.streamed_blocks = 0;
    if (blocks == 0) return p;
    const int streaming = plan.streaming(blocks);
    if (streaming >= blocks) return std::nullopt;
    const std::optional<std::uint64_t> lacking = shortfall(event);
    if (lacking) {
        p.streamed_blocks = blocks_freeing(streaming, *lacking, context);
    } else if (2 * streaming < blocks) {
        p.streamed_blocks = 2 * streaming;
    }
    return p;
}

// "(5 of 12 blocks stream: 3.1 GiB for a shortfall of 2.4 GiB)".
std::string streaming_detail(const Plan& from, const Plan& to, const OomEvent& event,
                             const PolicyContext& context) {
    const int blocks = static_cast<int>(context.block_bytes.size());
    if (to.low_vram < 3 || blocks == 0) return std::string();
    const int before = from.streaming(blocks);
    const int after = to.streaming(blocks);
    std::uint64_t freed = 0;
    for (int i = before; i < after; ++i) freed += context.block_bytes[i];
    std::string text = " (" + std::to_string(after) + " of " + std::to_string(blocks) +
                       " blocks stream from the host: " + format_bytes_human(freed) + " more";
    if (event.work == Work::kCache && before == 0) {
        text += "; the encoders compute on the host at level 3";
    } else if (const std::optional<std::uint64_t> lacking = shortfall(event)) {
        text += " for a shortfall of " + format_bytes_human(*lacking);
        if (before == 0)
            text += " and " + format_bytes_human(context.stream_overhead) + " of fetched copies";
    }
    return text + ")";
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
std::vector<LadderRow> build_rows() {
    using B = LadderBranch;
    const LadderRow idle_expert{
        {"free.idle_expert_to_host",
         B::kTrainImage,
         {"model.idle_expert_on_host"},
         "a step computes with one expert, so the other waits on the host and comes to the "
         "device only when its timesteps do (every `train.switch_boundary_every` steps, and for "
         "previews)",
         "keep the expert that is not training in host memory (ai-toolkit: `model.low_vram: "
         "true`; loom: `oom.idle_expert_on_host: true`)",
         "offload the inactive expert to the CPU (musubi-tuner: `--offload_inactive_dit`)",
         /*free=*/true},
        idle_expert_to_host};
    const LadderRow encoders_off{
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
    const LadderRow sometimes{
        {"train.sometimes_largest_bucket",
         B::kTrainImage,
         {"datasets.max_bucket_pixels"},
         "the failing batch came from the largest bucket and smaller buckets have "
         "trained fine",
         kBucketAdvice,
         kBucketFlags},
        sometimes_largest_bucket};
    const LadderRow checkpointing{{"train.gradient_checkpointing",
                                   B::kTrainImage,
                                   {"train.gradient_checkpointing"},
                                   "activations dominate a training step's memory",
                                   "set `train.gradient_checkpointing: true`",
                                   "turn on gradient checkpointing (`--gradient_checkpointing`)"},
                                  gradient_checkpointing};
    const LadderRow batch{
        {"train.batch_1_accumulate",
         B::kTrainImage,
         {"train.batch_size", "train.gradient_accumulation"},
         "one item per forward pass; gradient accumulation keeps the effective batch",
         "batch size 1 (`train.batch_size: 1`; raise `train.gradient_accumulation` to "
         "keep the effective batch)",
         "batch size 1 (`--train_batch_size=1`; raise `--gradient_accumulation_steps` "
         "to keep the effective batch)"},
        batch_one};
    const LadderRow bucket{
        {"train.drop_largest_bucket",
         B::kTrainImage,
         {"datasets.max_bucket_pixels"},
         "the largest resolution bucket sets the step's peak; its items train one "
         "size down",
         kBucketAdvice,
         kBucketFlags},
        drop_largest_bucket};
    const LadderRow sampling{{kSamplingRungsRule,
                              B::kTrainImage,
                              {"sample.batch_prompts", "sample.batch_guidance", "sample.width",
                               "sample.height", "sample.num_frames", "sample.enabled"},
                              "a sampling pass ran just before this step",
                              std::string("shrink or disable sampling: ") + kSampleSizeAdvice +
                                  ", or " + kNoSamplingAdvice,
                              std::string("shrink or disable sampling: ") + kSampleSizeFlags +
                                  ", or " + kNoSamplingFlags}};
    const LadderRow low_vram{{"train.low_vram",
                              B::kTrainImage,
                              {"model.low_vram"},
                              "the last rung: keep less of the model on the device",
                              kLowVramAdvice,
                              kLowVramFlags},
                             low_vram_next,
                             streaming_detail};
    const LadderRow more_streamed{
        {"train.more_streamed_blocks",
         B::kTrainImage,
         {"model.streamed_blocks"},
         "block streaming keeps some blocks on the device; more of them stream from the host",
         "stream more of the model's blocks from the host (ai-toolkit: a larger "
         "`model.layer_offloading_transformer_percent`; loom: `oom.streamed_blocks`)",
         "swap more blocks to the CPU (musubi-tuner / sd-scripts: a larger `--blocks_to_swap`)"},
        more_streamed_blocks,
        streaming_detail};
    const RungSpec frames{"train.fewer_frames",
                          B::kTrainVideo,
                          {"datasets.num_frames"},
                          "frames are a video model's largest memory lever",
                          "use fewer frames: `datasets[].num_frames` (and `sample.num_frames`)",
                          "use fewer frames per clip"};
    const auto in = [](B branch, LadderRow row) {
        row.spec.branch = branch;
        return row;
    };

    std::vector<LadderRow> rows = {
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
         low_vram_next,
         streaming_detail},
        {{"load.more_streamed_blocks",
          B::kLoadCache,
          {"model.streamed_blocks"},
          "loading needs the blocks still on the device; more of them stream from the host",
          more_streamed.spec.advice,
          more_streamed.spec.flag_advice},
         more_streamed_blocks,
         streaming_detail},
        idle_expert,
        encoders_off,
        sometimes,
        checkpointing,
        batch,
        bucket,
        sampling,
        low_vram,
        more_streamed,
        // Frames are a video model's largest lever: halved once first (the guide's order), then,
        // after batch, checkpointing and buckets, again down to a single frame.
        in(B::kTrainVideo, idle_expert),
        in(B::kTrainVideo, encoders_off),
        in(B::kTrainVideo, sometimes),
        {frames, fewer_frames_first},
        in(B::kTrainVideo, batch),
        in(B::kTrainVideo, checkpointing),
        in(B::kTrainVideo, bucket),
        {frames, fewer_frames_again},
        in(B::kTrainVideo, sampling),
        in(B::kTrainVideo, low_vram),
        in(B::kTrainVideo, more_streamed),
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
         low_vram_next,
         streaming_detail},
        {{"save.more_streamed_blocks",
          B::kSave,
          {"model.streamed_blocks"},
          "the save failed again with blocks still on the device",
          more_streamed.spec.advice,
          more_streamed.spec.flag_advice},
         more_streamed_blocks,
         streaming_detail},
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

}  // namespace

const std::vector<LadderRow>& ladder_rows() {
    static const std::vector<LadderRow> kRows = build_rows();
    return kRows;
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

const std::vector<RungSpec>& rung_table() {
    static const std::vector<RungSpec> kTable = [] {
        std::vector<RungSpec> table;
        for (const LadderRow& row : ladder_rows()) table.push_back(row.spec);
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
