// The guide's case for a log (case_builder.h). The changes it advises are the guard's rungs
// (advice.h), named as the tool that wrote the log spells its settings, skipping what the log
// shows is already set.

#include "case_builder.h"

#include <algorithm>
#include <climits>

#include "log_text.h"
#include "loom/core/byte_size.h"
#include "loom/device/oom_classify.h"

namespace loom::doctor::detail {

namespace {

constexpr std::int64_t kLastEarlyStep = 10;            // the guide's "step 1-10"
constexpr std::int64_t kConservativeResolution = 768;  // the most a conservative config trains at

}  // namespace

const char* phase_label(Phase p) {
    switch (p) {
        case Phase::kLoad: return "model load";
        case Phase::kCache: return "latent / text-embedding caching";
        case Phase::kProbe: return "preflight probe";
        case Phase::kFirstSample: return "baseline sample";
        case Phase::kSample: return "sampling";
        case Phase::kTrainStep: return "training step";
        case Phase::kSave: return "save";
        case Phase::kNone: break;
    }
    return "unknown phase";
}

bool is_training_phase(Phase p) {
    return p == Phase::kTrainStep || p == Phase::kProbe || p == Phase::kSave;
}

const std::string& CaseBuilder::advice(const char* rule) const {
    return rung_advice(d_.tool, rule);
}

// The branch's rungs minus those the log shows are taken: checkpointing on, batch size 1.
std::vector<Advice> CaseBuilder::ladder(guard::LadderBranch branch) const {
    return training_ladder(d_.tool, branch, [&](const guard::RungSpec& r) {
        // A free rung depends on what the run caches, which a pasted log does not say; loom takes
        // it by itself at run time, and the advice starts at the guide's first costly rung.
        if (r.free) return true;
        if (r.rule == "train.gradient_checkpointing") {
            return st_.gradient_checkpointing && st_.gradient_checkpointing->value;
        }
        if (r.rule == "train.batch_1_accumulate") {
            return st_.batch_size && st_.batch_size->value <= 1;
        }
        return false;
    });
}

void CaseBuilder::build() {
    if (sightings_.empty()) {  // only loom's worker-state error: it ran out of nothing yet
        worker_state(
            "loom stopped with a worker-state error: the device had no usable memory "
            "before loom allocated anything");
        return;
    }
    const Sighting& first = sightings_.front();
    if (first.kind == OomKind::kHost) {
        host_ram(first);
        return;
    }
    if (const std::optional<std::string> why = worker_state_reason(first)) {
        worker_state(*why);
        return;
    }
    build_device_case(first);
    memory_held_elsewhere(first);
}

void CaseBuilder::build_device_case(const Sighting& first) {
    switch (first.phase) {
        case Phase::kLoad:
        case Phase::kCache:
        case Phase::kFirstSample: before_step_1(first); return;
        case Phase::kSample:
            if (first.success_before) {
                sampling_only(first);
            } else {
                before_step_1(first);
            }
            return;
        case Phase::kNone:
            if (first.success_before) {
                training(first);
            } else {
                before_step_1(first);
            }
            return;
        default: training(first); return;
    }
}

std::optional<std::string> CaseBuilder::worker_state_reason(const Sighting& first) const {
    if (starts_with(d_.loom_outcome, "worker state")) {
        return "loom stopped with a worker-state error: the device had no usable memory before "
               "loom allocated anything";
    }
    if (first.success_before) return std::nullopt;
    if (first.kind == OomKind::kLibrary) {
        return "cuBLAS/cuDNN could not allocate its handle or workspace before any training step "
               "(" +
               first.where.text.substr(0, first.where.text.find(" when calling")) + ")";
    }
    const OomFigures& f = first.figures.empty() ? d_.figures : first.figures;
    if (f.free && f.total && *f.total > 0 && *f.free * 50 <= *f.total) {
        // Nothing free is a worker problem only when this process's PyTorch is not the one
        // holding the memory (a PyTorch that filled the card itself is a config problem).
        const std::uint64_t half = *f.total / 2;
        const bool own = (f.allocated && *f.allocated >= half) ||
                         (f.reserved && *f.reserved >= half) ||
                         (f.this_process && *f.this_process >= half);
        if (!own) {
            std::string why = "the GPU had " + format_bytes_human(*f.free) + " free of " +
                              format_bytes_human(*f.total) + " before any training step";
            if (f.allocated) {
                why +=
                    ", and PyTorch in this process held only " + format_bytes_human(*f.allocated);
            }
            for (const OomFigures::Process& p : f.processes) {
                why += "; process " + p.pid + " held " + format_bytes_human(p.bytes);
            }
            return why;
        }
    }
    const bool conservative =
        st_.batch_size && st_.batch_size->value == 1 && st_.gradient_checkpointing &&
        st_.gradient_checkpointing->value && st_.max_resolution &&
        st_.max_resolution->value <= kConservativeResolution && !st_.is_video();
    if (conservative && is_training_phase(first.phase) && first.step.value_or(1) <= 1) {
        return "a conservative config (batch size 1, gradient checkpointing on, resolution up to " +
               std::to_string(st_.max_resolution->value) + ") failed at its very first step";
    }
    return std::nullopt;
}

void CaseBuilder::worker_state(const std::string& reason) {
    d_.log_case = LogCase::kWorkerState;
    d_.title = "GPU / worker state problem, not (only) the config";
    d_.cause =
        "possible GPU / worker state problem: memory held outside this job, or a worker "
        "that does not start clean (guide §5)";
    d_.reason = reason;
    d_.first_change =
        "stop retrying the same job: start it on a fresh worker (or free the GPU first)";
    d_.further_changes = {
        "if the same conservative config used to work and now fails instantly, escalate to "
        "support / your GPU provider with these figures",
        "on a fresh worker, if it still fails the same way, it is the config after all: follow "
        "the case the new log shows",
        "do not change the learning rate or the optimizer: they are not memory levers"};
}

void CaseBuilder::host_ram(const Sighting& first) {
    d_.log_case = LogCase::kHostRam;
    d_.title =
        std::string("host RAM ran out, not the GPU") +
        (first.phase != Phase::kNone ? std::string(" (during the ") + phase_label(first.phase) + ")"
                                     : std::string());
    d_.cause =
        "the job's host-RAM use (weights loaded in full precision before they are quantized or "
        "moved, in-RAM latent / text-embedding caches, data-loader workers) went past the "
        "machine's RAM and swap; the kernel's OOM killer ends such a process with SIGKILL "
        "(`Killed`, exit code 137 or -9)";
    const std::string& said = first.where.text;
    d_.reason = "the log reports a host out-of-memory death (\"" +
                said.substr(0, std::min<std::size_t>(said.size(), 120)) +
                "\"), not a CUDA out-of-memory error: the GPU settings are not the lever";
    const guard::RungSpec& caches = rung("host.caches_to_disk");
    d_.first_change = "move in-RAM caches to disk: " + rung_advice(d_.tool, caches);
    first_rungs_ = {&caches};
    d_.further_changes = {
        loader_workers_advice(d_.tool),
        rung_advice(d_.tool, "host.fewer_threads"),
        "more RAM or swap: a larger swap file (Windows: page file; WSL: `memory=` and `swap=` in "
        "`.wslconfig`), and close other programs",
        "load the model already quantized (fp8 / int8 weights) so the full-precision weights "
        "never sit in RAM",
        "`loom train` runs training under a supervisor: a process the OOM killer ends is "
        "restarted from its last checkpoint one host rung lower (caches on disk, then fewer CPU "
        "threads), with no manual retry",
        "leave the GPU settings (batch size, resolution, gradient checkpointing) alone: the GPU "
        "did not run out"};
}

// A small request failing with plenty free while this process's PyTorch holds little: the
// memory is somewhere the config does not control.
void CaseBuilder::memory_held_elsewhere(const Sighting& first) {
    constexpr std::uint64_t kSmallRequest = 512ull << 20;
    constexpr std::uint64_t kPlentyFree = 1ull << 30;
    const OomFigures& f = first.figures.empty() ? d_.figures : first.figures;
    if (!f.requested || !f.free || !f.total || *f.requested > kSmallRequest) return;
    if (*f.free < *f.requested + kPlentyFree) return;
    const std::optional<std::uint64_t> held = f.allocated ? f.allocated : f.this_process;
    if (!held || *held * 2 >= *f.total) return;
    d_.reason += "; only " + format_bytes_human(*f.requested) + " was asked for while " +
                 format_bytes_human(*f.free) + " was free and PyTorch held " +
                 format_bytes_human(*held) + " of " + format_bytes_human(*f.total) +
                 ": the memory is held elsewhere (another process, a per-process memory cap, "
                 "the display) or fragmented";
    d_.further_changes.insert(
        d_.further_changes.begin(),
        "memory held elsewhere or fragmented: check `nvidia-smi` for other processes on the GPU, "
        "and set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` against fragmentation");
}

void CaseBuilder::before_step_1(const Sighting& first) {
    d_.log_case = LogCase::kBeforeStep1;
    d_.cause = "preview too heavy, memory pressure while loading, or a dirty worker";
    const LogTool tool = d_.tool;
    if (first.phase == Phase::kLoad || first.phase == Phase::kCache) {
        d_.moment = first.phase == Phase::kLoad ? "load" : "cache";
        d_.title =
            std::string("OOM before training step 1, during the ") + phase_label(first.phase);
        d_.reason = std::string("the first OOM happened during the ") + phase_label(first.phase) +
                    ", before any training step completed";
        if (st_.low_vram && !st_.low_vram->value) d_.reason += "; low_vram is off in this log";
        d_.first_change = advice("load.low_vram");
        first_rungs_ = {&rung("load.low_vram")};
        d_.further_changes = {
            "if low_vram is already on: the model's quantization or layer offloading "
            "(`model.quantize: true`, `model.layer_offloading: true`)",
            "if a conservative config fails at load on a card that used to fit it, start on a "
            "fresh worker (guide §5)"};
        return;
    }
    first_rungs_ = {&rung("sample.halve_size"), &rung("sample.disable")};
    if (first.phase == Phase::kFirstSample || first.phase == Phase::kSample) {
        d_.moment = "first_sample";
        d_.title = "OOM before training step 1, during the baseline sample";
        d_.reason =
            "the first OOM happened while generating the baseline sample, before any "
            "training step";
        d_.first_change = "skip or shrink the baseline sample: " + skip_first_sample_advice(tool) +
                          ", or " + advice("sample.halve_size") + " (for a validation run, " +
                          advice("sample.disable") + ")";
        d_.further_changes = {
            "once training is stable, turn previews back on with smaller settings, one at a time",
            "if it still fails with sampling off, treat it as a load problem: " +
                advice("load.low_vram")};
        return;
    }
    d_.title = "OOM before training step 1";
    d_.reason =
        "the OOM happened before any training step completed; the log does not show "
        "whether it was the model load or the baseline sample";
    d_.first_change = "disable sampling or shrink the preview: " + advice("sample.disable") +
                      " or " + advice("sample.halve_size");
    d_.further_changes = {"if the crash is during the model load: " + advice("load.low_vram"),
                          "if a conservative config fails instantly, start on a fresh worker "
                          "(guide §5)"};
}

void CaseBuilder::training(const Sighting& first) {
    // loom's "sometimes" rule fires when the failing batch came from the largest bucket and
    // smaller buckets trained fine: the guide's "sometimes yes, sometimes no", even at step 3.
    const bool loom_sometimes = loom_answer_ && contains(loom_answer_->rule, "sometimes");
    if (st_.is_video()) {
        video_frames(first);
    } else if (loom_sometimes) {
        sometimes(first);
    } else if (first.step.value_or(1) <= kLastEarlyStep && successes_after_oom_ == 0) {
        early_steps(first);
    } else {
        sometimes(first);
    }
}

std::string CaseBuilder::later_ooms() const {
    std::vector<std::int64_t> steps;
    for (std::size_t i = 1; i < sightings_.size(); ++i) {
        if (sightings_[i].step && is_training_phase(sightings_[i].phase)) {
            steps.push_back(*sightings_[i].step);
        }
    }
    if (steps.empty()) return {};
    std::string out = "; OOM again at step";
    out += steps.size() > 1 ? "s " : " ";
    for (std::size_t i = 0; i < steps.size() && i < 6; ++i) {
        out += (i ? ", " : "") + std::to_string(steps[i]);
    }
    return out + (steps.size() > 6 ? ", ..." : "");
}

void CaseBuilder::early_steps(const Sighting& first) {
    const std::int64_t step = first.step.value_or(1);
    d_.log_case = LogCase::kEarlySteps;
    d_.title = "OOM in the first training steps (step " + std::to_string(step) + ")";
    d_.cause = "gradient checkpointing off, batch size too high, or the largest bucket too big";
    d_.reason = "training ran out of memory at step " + std::to_string(step) +
                (first.success_before ? " after " + plural(step - 1, "successful step")
                                      : std::string(", before any step succeeded")) +
                later_ooms() + (aborted_ ? "; the run then gave up" : "");
    if (st_.gradient_checkpointing && !st_.gradient_checkpointing->value) {
        d_.reason += "; gradient checkpointing is off in this log";
    }
    if (st_.batch_size && st_.batch_size->value > 1) {
        d_.reason += "; batch size " + std::to_string(st_.batch_size->value);
    }
    const std::vector<Advice> ladder = this->ladder(guard::LadderBranch::kTrainImage);
    d_.first_change = ladder.front().text;
    first_rungs_ = {ladder.front().rung};
    for (std::size_t i = 1; i < ladder.size(); ++i) d_.further_changes.push_back(ladder[i].text);
}

void CaseBuilder::sampling_only(const Sighting& first) {
    d_.log_case = LogCase::kSamplingOnly;
    d_.title = "OOM while generating samples; the training steps were fine";
    d_.cause = "preview settings too expensive";
    d_.reason = "training steps succeeded" +
                (first.step && *first.step > 0 ? " up to step " + std::to_string(*first.step)
                                               : std::string()) +
                ", then the OOM happened while generating samples";
    d_.first_change = "make previews cheaper: " + advice("sample.halve_size") + ", " +
                      sample_every_advice(d_.tool) + ", or " + advice("sample.disable");
    first_rungs_ = {&rung("sample.halve_size"), &rung("sample.disable")};
    d_.further_changes = {
        "leave the training settings (batch size, buckets, gradient checkpointing) as they are: "
        "the steps fit",
        "video models: " + advice("sample.fewer_frames"),
        "once stable, turn richer previews back on one setting at a time"};
}

void CaseBuilder::sometimes(const Sighting& first) {
    d_.log_case = LogCase::kSometimes;
    const std::string step = first.step ? std::to_string(*first.step) : std::string("?");
    d_.title = "OOM sometimes: a borderline config (first at step " + step + ")";
    d_.cause =
        "a borderline config: the small buckets fit, the largest (or the heaviest clips) "
        "do not";
    d_.reason = "the first training OOM came at step " + step +
                (first.success_before ? " after successful steps" : std::string()) + later_ooms() +
                (successes_after_oom_ > 0
                     ? "; training succeeded again afterwards (" +
                           plural(successes_after_oom_, "successful step") + " after an OOM)"
                 : loom_answer_ && contains(loom_answer_->rule, "sometimes")
                     ? "; loom: " + loom_answer_->reason
                     : std::string("; a late OOM after a run of good steps"));
    // The "sometimes" rung first, then the rest of the image ladder.
    const guard::RungSpec& largest = rung("train.sometimes_largest_bucket");
    d_.first_change = rung_advice(d_.tool, largest) + " and run until stable";
    first_rungs_ = {&largest};
    for (const Advice& a : ladder(guard::LadderBranch::kTrainImage)) {
        if (a.text == rung_advice(d_.tool, largest)) continue;
        const bool sampling = a.rung->rule == guard::kSamplingRungsRule;
        d_.further_changes.push_back((sampling ? "if the OOMs line up with sample steps, " : "") +
                                     a.text);
    }
    d_.further_changes.push_back("once stable, add heavier settings back one at a time (guide §7)");
}

void CaseBuilder::video_frames(const Sighting& first) {
    d_.log_case = LogCase::kVideoFrames;
    const std::string step = first.step ? std::to_string(*first.step) : std::string("?");
    d_.title = "video model OOM in training (step " + step + ")";
    d_.cause =
        "frames are the biggest memory lever of video models: too many frames, too large "
        "buckets, or both";
    d_.reason = "a video model";
    if (st_.num_frames && st_.num_frames->value > 1) {
        d_.reason += " training " + std::to_string(st_.num_frames->value) + "-frame clips";
    }
    d_.reason += " ran out of memory at training step " + step + later_ooms() +
                 (aborted_ ? "; the run then gave up" : "");
    // Frames first, as loom's own video ladder does, then the rest of that ladder.
    const std::vector<Advice> ladder = this->ladder(guard::LadderBranch::kTrainVideo);
    d_.first_change = ladder.front().text;
    first_rungs_ = {ladder.front().rung};
    if (st_.num_frames && st_.num_frames->value > 1) {
        const int frames = static_cast<int>(std::min<std::int64_t>(st_.num_frames->value, INT_MAX));
        d_.first_change += ", e.g. " + std::to_string(frames) + " -> " +
                           std::to_string(guard::halve_frames(frames)) + " (keep 4k+1)";
    }
    for (std::size_t i = 1; i < ladder.size(); ++i) d_.further_changes.push_back(ladder[i].text);
    d_.further_changes.push_back("do not start with the optimizer or the learning rate");
}

}  // namespace loom::doctor::detail
