#pragma once

// The rollback ladder as a pure function: (Plan, OomEvent, History) -> Decision. No torch, no
// I/O; every rule of DESIGN.md "Recovery specification" (from the user guide,
// reference/oom-guide.txt §4–§6) is a branch here with its own unit test.
//
//   sampling OOM (first sample, periodic sample, the probe's sampling pass): only sampling
//     changes — prompts one at a time, guidance passes sequential, halve width/height (multiple
//     of 64, floor 256 or the smallest training bucket), video: fewer sample frames, then
//     sampling off.
//   load / cache OOM: low_vram, then more streamed blocks (batch and buckets do not exist yet).
//   training-step OOM, images: first the free rungs — changes that cost no step time at this point
//     of the run (a model of experts' idle expert on the host; the idle encoders off the device
//     once every latent and text embedding is cached) — then gradient checkpointing, batch 1 with
//     accumulation (effective batch kept), drop the largest bucket (repeatable), shrink sampling
//     when a sampling pass left memory behind, low_vram. Video: the free rungs, fewer frames
//     (halved once), batch 1, gradient checkpointing, buckets, then frames again down to 1,
//     sampling, low_vram — whose level 3 streams the fewest of the denoiser's blocks that cover
//     the shortfall, and a further OOM more of them (Plan::streamed_blocks). With the probe on, the
//     guard measures the plans around the documented one that differ only in how a step is computed
//     (checkpointing, micro-batch, block streaming: measured_candidates) and takes the fastest that
//     fits; the documented plan wins ties, and this order stays the explanation.
//   "sometimes": the failing batch came from the largest bucket and smaller buckets have trained
//     fine → dropping that bucket comes first.
//   save OOM: free and retry once, then low_vram, then more streamed blocks.
//   worker state: memory held outside loom with the ladder exhausted before any step succeeded,
//     or a library allocation failure there → stop, distinct exit.
//   host RAM: never the device ladder — in-RAM caches to disk, then fewer CPU threads.
// One change per decision; a plan already seen failing at the same kind of work is skipped
// (never the same retry twice); the learning rate, optimizer, steps, rank and dtype are not knobs.

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/device/memory_stats.h"
#include "loom/device/oom_classify.h"
#include "loom/device/phase.h"
#include "loom/guard/plan.h"

namespace loom::guard {

// What the failing phase was doing; the probe has a training part and a sampling part.
enum class Work { kLoad, kCache, kTrain, kSample, kSave };
const char* to_string(Work work);
// "device", "library", "host", "none": the kind as events.jsonl and the WARN lines name it.
const char* kind_name(OomKind kind);
// The work a phase does (kProbe maps to kTrain; the probe's sampling pass is passed explicitly).
Work work_of(Phase phase);

// The active buckets under the current plan, as the data layer sees them.
struct BucketFacts {
    std::size_t active = 1;                // buckets holding items
    std::int64_t largest_area = 0;         // pixels of the largest active bucket
    std::optional<std::int64_t> next_cap;  // the cap that drops it (nullopt: nothing to drop)
    int smallest_side = 256;               // shorter side of the smallest bucket (sampling floor)
    // The most frames an active bucket's clips have (below the plan's cap when every clip is
    // shorter, with auto_frame_count); nullopt: not known, the plan's cap stands for it.
    std::optional<int> longest_clip;
};

// Facts about the job that no decision changes.
struct PolicyContext {
    bool video = false;
    int job_frames = 1;  // the clip length the job asks for (video: the first rung halves it once)
    // How many low-VRAM sub-modes exist; 0 while the mechanism is unavailable (the ladder's
    // last rung then reports that it cannot help).
    int low_vram_levels = 0;
    std::size_t prompt_count = 1;  // preview prompts (batching them only matters with > 1)
    bool guidance = true;          // classifier-free guidance (scale > 1): two passes per step
    int host_threads = 1;          // LibTorch's intra-op threads when the plan says 0
    // Latents are cached and captions repeat: at low_vram level 1 (which caches the text
    // embeddings) the text encoder(s) and the VAE only work for previews and a caption's first
    // use, so moving them to the host costs no step time (the free rung).
    bool encoders_idle = false;
    // Denoisers of their own timesteps (Wan 2.2 14B: 2). With more than one, a step computes
    // with one expert only, so the others can wait on the host (the first free rung).
    int experts = 1;
    // The denoiser's blocks in low_vram's streaming order (train/low_vram.h), each as the device
    // memory it frees when it streams (its weights at level 2, quantized); empty until the model
    // is placed, and then level 3 streams every block. With them, level 3 and each further OOM
    // stream the fewest blocks that cover the shortfall (Plan::streamed_blocks).
    std::vector<std::uint64_t> block_bytes;
    // What streaming adds to a step however few blocks stream: the fetched device copies that
    // can be alive at once (the prefetch depth + 1 of the largest streamed layers).
    std::uint64_t stream_overhead = 0;
};

struct OomEvent {
    Phase phase = Phase::kNone;
    Work work = Work::kTrain;
    std::optional<std::int64_t> step;  // 1-based training step, when in one
    OomKind kind = OomKind::kDevice;
    std::optional<std::uint64_t> bytes_requested;  // parsed from the message when it says
    // After the failed attempt unwound: allocated/reserved/free as the device reports them then
    // (what stays held is loom's or foreign), peak_allocated = in use when the attempt failed.
    MemoryStats memory;
    std::optional<std::pair<int, int>> bucket;  // width, height of the failing micro-batch
    int bucket_frames = 1;                      // and its clips' frames
    BucketFacts buckets;                        // under the plan that failed
    bool after_sample = false;  // a sampling pass ran since the last successful step
    std::string message;
};

struct History {
    std::int64_t steps_succeeded = 0;             // training steps done in this process
    std::set<std::int64_t> trained_bucket_areas;  // buckets whose batches trained fine
    std::vector<std::pair<Work, Plan>> failed;    // each plan that failed, and at what
    int save_retries = 0;                         // free-and-retry attempts of the current save
};

struct Decision {
    enum class Action {
        kRetry,        // retry the same work with `plan` (one knob changed, or none for save)
        kDoesNotFit,   // the ladder is exhausted: `plan` is the smallest plan tried
        kWorkerState,  // the device itself is the problem: stop, start on a fresh worker
        kHostMemory,   // host RAM, not the device: the device ladder does not apply
    };
    Action action = Action::kRetry;
    Plan plan;
    std::string rule;    // stable id of the rule that chose this ("train.gradient_checkpointing")
    std::string reason;  // one sentence: why this change
    std::vector<KnobChange> changes;  // plan vs the failing plan (one knob, or batch + accum)
};
const char* to_string(Decision::Action action);

Decision decide(const Plan& plan, const OomEvent& event, const History& history,
                const PolicyContext& context);

// The measured choice (issue 22, with the probe on; the guard measures, this decides what).
// A rung it answers: a training-step rung that is neither free nor sampling's.
bool measured_rung(std::string_view rule);
// `to` differs from `from` only in how a step is computed, in ways a measurement can try and
// leave: gradient checkpointing, the micro-batch (accumulation keeping the effective batch),
// low_vram and its streamed blocks (a measurement keeps the float32 weights while it tries bf16).
// Such a documented rung is measured against the other candidates; after one that is not (a bucket,
// frames), the candidates are measured around the new plan.
bool reversible_change(const Plan& from, const Plan& to);
// The candidates around `base`: every combination of low_vram (the plan's level and each above;
// level 3 with base's streamed blocks when base streams, else `streamed_blocks`),
// checkpointing (the job's setting, or on) and the micro-batch (from the job's down to 1, each
// dividing the effective batch); never one that needs at least what a plan that ran out of memory
// in training needed, knob by knob (no_heavier). In a fixed order: lower levels first, then the
// job's checkpointing first, then larger micro-batches first. Once a plan at the job's
// micro-batch is the best at some level, the guard measures only the next level at that
// micro-batch above it.
std::vector<Plan> measured_candidates(const Plan& base, const Plan& job, const History& history,
                                      const PolicyContext& context, int streamed_blocks = 0);
// The decision that moves `from` to `chosen`: the rung of the branch that makes exactly that
// change (its rule and reason), or kMeasuredRule; `measured` (the figures) ends the reason.
Decision measured_decision(const Plan& from, const Plan& chosen, const OomEvent& event,
                           const History& history, const PolicyContext& context,
                           const std::string& measured);

// A training process that died without a word (SIGKILL: the host's OOM killer) is restarted
// one rung lower on the host ladder: the decision for a host OOM outside any phase.
Decision decide_after_death(const Plan& plan, const PolicyContext& context);

// "0 bytes is free" before loom allocated anything: free below 5% of the total.
bool device_looks_dirty(const MemoryStats& before_any_allocation);

// Memory the device reports in use that loom's allocator does not hold (another process, a
// leaked context): total − free − reserved, never negative.
std::uint64_t foreign_bytes(const MemoryStats& memory);

// Sampling-size arithmetic, exposed for tests: half of `side`, rounded down to a multiple of
// 64, at least `floor`; equal to `side` when it cannot shrink.
int halve_sample_side(int side, int floor);
// The sampling floor: 256, or the smallest training bucket's shorter side when that is smaller
// (rounded down to a multiple of 8, at least 8).
int sample_floor(int smallest_bucket_side);
// Video frames: half, kept of the form 4k+1 (81 → 41 → 21 → 9 → 5 → 1); 1 stays 1.
int halve_frames(int frames);

// ---------------------------------------------------------------------------------------------
// The rung table: every rung of the ladder once per branch, in the order decide() tries them.
// decide() walks it, and `loom doctor` reads it for its advice and its order, so the two never
// disagree about what comes next.

// Which failure a branch answers: a sampling OOM, a load or cache OOM, a training-step OOM of an
// image or a video model, a save OOM, or host RAM (whatever the phase).
enum class LadderBranch { kSampling, kLoadCache, kTrainImage, kTrainVideo, kSave, kHost };
// "sampling", "load_cache", "train_image", "train_video", "save", "host".
const char* to_string(LadderBranch branch);
// The branch decide() walks for `event` (kHost for host RAM, else by the work that failed).
LadderBranch ladder_branch(const OomEvent& event, const PolicyContext& context);

// The rule of the training branches' row that stands for the whole sampling branch: its rungs,
// in their order, with their own rule ids and this row's reason before theirs ("a sampling pass
// ran just before this step: ..."), tried only when a sampling pass ran since the last step.
inline constexpr const char* kSamplingRungsRule = "sample.*";
// A measured choice that no single rung of the table makes (several knobs at once, or back from
// an earlier change once a later rung made room).
inline constexpr const char* kMeasuredRule = "measured.fastest";

struct RungSpec {
    std::string rule;  // the Decision::rule it produces ("train.gradient_checkpointing")
    LadderBranch branch;
    std::vector<std::string> knobs;  // the plan knobs it turns, as diff() names them
    // Decision::reason when it is taken (sample.halve_size adds " (floor N px)").
    std::string reason;
    // The same change made by hand, in the job YAML loom and ai-toolkit share ("set
    // `train.gradient_checkpointing: true`"), and in the flags of kohya sd-scripts and the
    // diffusers training scripts.
    std::string advice;
    std::string flag_advice;
    // Costs no step time at this point of the run: tried before every costly rung.
    bool free = false;
};

// Every row, branch by branch. A rule may appear in several branches (the bucket rung of image
// and video models) or twice in one (video frames are halved once first, then again later).
// Built once; safe to read from any thread.
const std::vector<RungSpec>& rung_table();
// The rows of one branch, in order (pointers into rung_table()).
std::vector<const RungSpec*> rungs_of(LadderBranch branch);
// The first row with `rule`, or nullptr.
const RungSpec* find_rung(std::string_view rule);

// `plan` already ran out of memory doing `work` in this run.
bool already_failed(const History& history, Work work, const Plan& plan);

}  // namespace loom::guard
