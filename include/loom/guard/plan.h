#pragma once

// The Plan: every memory knob the OOM ladder may turn (DESIGN.md "Recovery specification"), and
// nothing else — never the learning rate, optimizer, steps, rank or dtype. A run starts from the
// job's settings (or the run folder's persisted plan.yaml), and each ladder rung changes one knob.
//
// Batching: `batch_size` is the micro-batch one forward/backward sees; `gradient_accumulation`
// is how many micro-batches make a step. Their product is the effective batch, which the ladder
// keeps: batch 4 × 1 becomes batch 1 × 4. Which items a step trains on is decided by the job's
// own batch and accumulation (the data order), so a plan change never changes the data.
//
// Plain C++, no torch.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "loom/config/job.h"

namespace loom::guard {

struct SamplePlan {
    bool enabled = true;
    int width = 1024;  // a cap: each preview is at most this wide (and its own size otherwise)
    int height = 1024;
    bool batch_prompts = true;   // all prompts in one batch (else one at a time)
    bool batch_guidance = true;  // conditional and unconditional passes in one batch
    int frames = 1;              // video previews

    bool operator==(const SamplePlan& o) const {
        return enabled == o.enabled && width == o.width && height == o.height &&
               batch_prompts == o.batch_prompts && batch_guidance == o.batch_guidance &&
               frames == o.frames;
    }
    bool operator!=(const SamplePlan& o) const { return !(*this == o); }
};

// Host RAM knobs (never touched for a device OOM, and the device knobs never for host OOM).
struct HostPlan {
    bool memory_caches = true;  // latents and text embeddings kept in RAM (else on disk)
    int threads = 0;            // intra-op CPU threads; 0: LibTorch's default

    bool operator==(const HostPlan& o) const {
        return memory_caches == o.memory_caches && threads == o.threads;
    }
    bool operator!=(const HostPlan& o) const { return !(*this == o); }
};

struct Plan {
    bool gradient_checkpointing = false;
    int batch_size = 1;
    int gradient_accumulation = 1;
    // Buckets larger than this many pixels are inactive (their items are bucketed one size
    // down); nullopt: every bucket is active.
    std::optional<std::int64_t> max_bucket_pixels;
    int frames = 1;    // training clip length (video models; 1 for images)
    int low_vram = 0;  // 0: off; 1, 2, ...: the low-VRAM sub-modes switched on, in order
    SamplePlan sample;
    HostPlan host;

    int effective_batch() const { return batch_size * gradient_accumulation; }

    bool operator==(const Plan& o) const {
        return gradient_checkpointing == o.gradient_checkpointing && batch_size == o.batch_size &&
               gradient_accumulation == o.gradient_accumulation &&
               max_bucket_pixels == o.max_bucket_pixels && frames == o.frames &&
               low_vram == o.low_vram && sample == o.sample && host == o.host;
    }
    bool operator!=(const Plan& o) const { return !(*this == o); }
};

// The plan a job asks for: train.gradient_checkpointing, the (common) batch size,
// train.gradient_accumulation, the largest dataset num_frames, model.low_vram, and the sample
// block (disabled by train.disable_sampling or when there are no prompts).
Plan plan_from_job(const config::ProcessConfig& process);

// One line per knob, "gradient_checkpointing true, batch 1 × 4, buckets ≤ 64x64 px, ...": what
// the WARN lines and the "does not fit" message print.
std::string describe(const Plan& plan);

// One knob that differs between two plans.
struct KnobChange {
    std::string knob;  // "train.gradient_checkpointing", "train.batch_size", "sample.width", ...
    std::string from;
    std::string to;
};
// Every knob that differs, in a fixed order.
std::vector<KnobChange> diff(const Plan& from, const Plan& to);

// Scale-up: `current` with every knob that a change from `before` to `after` moved set back to
// its value in `before` (the other knobs as in `current`).
Plan undo_change(const Plan& current, const Plan& before, const Plan& after);

// plan.yaml: the YAML text, and reading it back. parse_plan throws FormatError naming `source`
// and the key when the text is malformed; keys it does not know are an error too (a plan is
// written by loom, so a strange key means a damaged or foreign file).
std::string plan_to_yaml(const Plan& plan);
Plan parse_plan(const std::string& text, const std::string& source);
// Atomic write (temp file, fsync, rename); read throws IoError / FormatError naming the file.
void save_plan(const std::filesystem::path& file, const Plan& plan);
Plan load_plan(const std::filesystem::path& file);

}  // namespace loom::guard
