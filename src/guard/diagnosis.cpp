// `loom doctor`'s judgement: the facts one pass over the log collected (log_scanner.h) become the
// user guide's case (reference/oom-guide.txt §4, §5) with its most likely cause, the first change
// to make — named as the tool that wrote the log spells its settings — the changes after it, and
// the lines that prove it. Printing is in diagnosis_render.cpp.

#include "loom/guard/diagnosis.h"

#include <algorithm>
#include <fstream>
#include <utility>

#include "log_scanner.h"
#include "log_text.h"
#include "loom/core/byte_size.h"
#include "loom/core/error.h"
#include "loom/device/oom_classify.h"
#include "loom/device/phase.h"

namespace loom::guard {

namespace {

using detail::contains;
using detail::LogFacts;
using detail::LogScanner;
using detail::Noted;
using detail::plural;
using detail::Settings;
using detail::Sighting;
using detail::starts_with;

constexpr std::size_t kMaxEvidence = 12;               // evidence lines reported
constexpr std::int64_t kLastEarlyStep = 10;            // the guide's "step 1-10"
constexpr std::int64_t kConservativeResolution = 768;  // the most a conservative config trains at

// ---------------------------------------------------------------------------------------------
// The guide's table

enum class Knob {
    kGradientCheckpointing,
    kBatchSize,
    kLargestBucket,
    kSampleSize,
    kSampleEvery,
    kDisableSampling,
    kSkipFirstSample,
    kLowVram,
    kFrames,
};

// The setting's name as the user writes it: ai-toolkit/loom YAML, or kohya/diffusers flags.
std::string knob(LogTool tool, Knob k) {
    const bool flags = tool == LogTool::kKohya || tool == LogTool::kPyTorch;
    switch (k) {
        case Knob::kGradientCheckpointing:
            return flags ? "turn on gradient checkpointing (`--gradient_checkpointing`)"
                         : "set `train.gradient_checkpointing: true`";
        case Knob::kBatchSize:
            return flags ? "batch size 1 (`--train_batch_size=1`; raise "
                           "`--gradient_accumulation_steps` to keep the effective batch)"
                         : "batch size 1 (`train.batch_size: 1`; raise "
                           "`train.gradient_accumulation` to keep the effective batch)";
        case Knob::kLargestBucket:
            return flags ? "drop the largest resolution (`--resolution`, or the largest bucket of "
                           "the dataset config)"
                         : "drop the largest resolution bucket from `datasets[].resolution`";
        case Knob::kSampleSize:
            return flags ? "smaller previews (the sample prompts' `--w`/`--h`/`--s`, or the "
                           "validation size and steps)"
                         : "lower `sample.width` / `sample.height` / `sample.sample_steps`";
        case Knob::kSampleEvery:
            return flags ? "sample less often (`--sample_every_n_steps`, `--validation_steps`)"
                         : "raise `sample.sample_every`";
        case Knob::kDisableSampling:
            return flags ? "no sampling during training (drop `--sample_prompts` / "
                           "`--validation_prompt`)"
                         : "`train.disable_sampling: true`";
        case Knob::kSkipFirstSample:
            return flags ? "no sample before training (drop `--sample_at_first`)"
                         : "`train.skip_first_sample: true`";
        case Knob::kLowVram:
            return flags ? "the model's low-memory path (sd-scripts: `--lowram`, "
                           "`--blocks_to_swap`, `--fp8_base`)"
                         : "the model's low-memory path: `model.low_vram: true` (with the "
                           "quantization / text-encoder settings the model's guide gives)";
        case Knob::kFrames:
            return flags ? "fewer frames per clip"
                         : "fewer frames: `datasets[].num_frames` (and `sample.num_frames`)";
    }
    return {};
}

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

// Half the frames, kept at 4k+1 as video VAEs want (81 -> 41, 33 -> 17).
std::int64_t fewer_frames(std::int64_t frames) {
    return std::max<std::int64_t>(1, (frames - 1) / 2 / 4 * 4 + 1);
}

class CaseBuilder {
  public:
    CaseBuilder(Diagnosis& d, const Settings& st, const std::vector<Sighting>& sightings,
                std::int64_t successes_after_oom, bool aborted)
        : d_(d),
          st_(st),
          sightings_(sightings),
          successes_after_oom_(successes_after_oom),
          aborted_(aborted) {}

    // loom's answer to the first OOM, when the log has it: its ladder sees which bucket failed.
    void set_loom_answer(const LoomChange* change) { loom_answer_ = change; }

    void build();

  private:
    std::optional<std::string> worker_state_reason(const Sighting& first) const;
    void before_step_1(const Sighting& first);
    void training(const Sighting& first);
    void early_steps(const Sighting& first);
    void sampling_only(const Sighting& first);
    void sometimes(const Sighting& first);
    void video_frames(const Sighting& first);
    void worker_state(const std::string& reason);
    std::vector<std::string> image_ladder() const;
    std::string later_ooms() const;

    Diagnosis& d_;
    const Settings& st_;
    const std::vector<Sighting>& sightings_;
    std::int64_t successes_after_oom_;
    bool aborted_;
    const LoomChange* loom_answer_ = nullptr;
};

void CaseBuilder::build() {
    if (sightings_.empty()) {  // only loom's worker-state error: it ran out of nothing yet
        worker_state(
            "loom stopped with a worker-state error: the device had no usable memory "
            "before loom allocated anything");
        return;
    }
    const Sighting& first = sightings_.front();
    if (const std::optional<std::string> why = worker_state_reason(first)) {
        worker_state(*why);
        return;
    }
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
        d_.first_change = "use " + knob(tool, Knob::kLowVram);
        d_.further_changes = {
            "if low_vram is already on: the model's quantization or layer offloading "
            "(`model.quantize: true`, `model.layer_offloading: true`)",
            "if a conservative config fails at load on a card that used to fit it, start on a "
            "fresh worker (guide §5)"};
        return;
    }
    if (first.phase == Phase::kFirstSample || first.phase == Phase::kSample) {
        d_.moment = "first_sample";
        d_.title = "OOM before training step 1, during the baseline sample";
        d_.reason =
            "the first OOM happened while generating the baseline sample, before any "
            "training step";
        d_.first_change =
            "skip or shrink the baseline sample: " + knob(tool, Knob::kSkipFirstSample) + ", or " +
            knob(tool, Knob::kSampleSize) + " (for a validation run, " +
            knob(tool, Knob::kDisableSampling) + ")";
        d_.further_changes = {
            "once training is stable, turn previews back on with smaller settings, one at a time",
            "if it still fails with sampling off, treat it as a load problem: " +
                knob(tool, Knob::kLowVram)};
        return;
    }
    d_.title = "OOM before training step 1";
    d_.reason =
        "the OOM happened before any training step completed; the log does not show "
        "whether it was the model load or the baseline sample";
    d_.first_change =
        "disable sampling or shrink the preview: " + knob(tool, Knob::kDisableSampling) + " or " +
        knob(tool, Knob::kSampleSize);
    d_.further_changes = {"if the crash is during the model load: " + knob(tool, Knob::kLowVram),
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

// The image ladder (guide §6), skipping what the log shows is already done.
std::vector<std::string> CaseBuilder::image_ladder() const {
    std::vector<std::string> out;
    if (!st_.gradient_checkpointing || !st_.gradient_checkpointing->value) {
        out.push_back(knob(d_.tool, Knob::kGradientCheckpointing));
    }
    if (!st_.batch_size || st_.batch_size->value > 1)
        out.push_back(knob(d_.tool, Knob::kBatchSize));
    out.push_back(knob(d_.tool, Knob::kLargestBucket));
    out.push_back("shrink or disable sampling: " + knob(d_.tool, Knob::kSampleSize) + ", or " +
                  knob(d_.tool, Knob::kDisableSampling));
    out.push_back("use " + knob(d_.tool, Knob::kLowVram));
    return out;
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
    std::vector<std::string> ladder = image_ladder();
    d_.first_change = ladder.front();
    d_.further_changes.assign(ladder.begin() + 1, ladder.end());
}

void CaseBuilder::sampling_only(const Sighting& first) {
    d_.log_case = LogCase::kSamplingOnly;
    d_.title = "OOM while generating samples; the training steps were fine";
    d_.cause = "preview settings too expensive";
    d_.reason = "training steps succeeded" +
                (first.step && *first.step > 0 ? " up to step " + std::to_string(*first.step)
                                               : std::string()) +
                ", then the OOM happened while generating samples";
    d_.first_change = "make previews cheaper: " + knob(d_.tool, Knob::kSampleSize) + ", " +
                      knob(d_.tool, Knob::kSampleEvery) + ", or " +
                      knob(d_.tool, Knob::kDisableSampling);
    d_.further_changes = {
        "leave the training settings (batch size, buckets, gradient checkpointing) as they are: "
        "the steps fit",
        "video models: fewer preview frames (`sample.num_frames`)",
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
    d_.first_change = knob(d_.tool, Knob::kLargestBucket) + " and run until stable";
    if (!st_.gradient_checkpointing || !st_.gradient_checkpointing->value) {
        d_.further_changes.push_back(knob(d_.tool, Knob::kGradientCheckpointing));
    }
    if (!st_.batch_size || st_.batch_size->value > 1) {
        d_.further_changes.push_back(knob(d_.tool, Knob::kBatchSize));
    }
    d_.further_changes.push_back("if the OOMs line up with sample steps, make sampling cheaper: " +
                                 knob(d_.tool, Knob::kSampleSize));
    d_.further_changes.push_back("use " + knob(d_.tool, Knob::kLowVram));
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
    d_.first_change = "use " + knob(d_.tool, Knob::kFrames);
    if (st_.num_frames && st_.num_frames->value > 1) {
        d_.first_change += ", e.g. " + std::to_string(st_.num_frames->value) + " -> " +
                           std::to_string(fewer_frames(st_.num_frames->value)) + " (keep 4k+1)";
    }
    if (!st_.batch_size || st_.batch_size->value > 1) {
        d_.further_changes.push_back(knob(d_.tool, Knob::kBatchSize));
    }
    d_.further_changes.push_back(knob(d_.tool, Knob::kLargestBucket));
    d_.further_changes.push_back("reduce or disable sampling: " +
                                 knob(d_.tool, Knob::kDisableSampling));
    d_.further_changes.push_back("use " + knob(d_.tool, Knob::kLowVram) + ", or layer offloading");
    d_.further_changes.push_back("do not start with the optimizer or the learning rate");
}

// ---------------------------------------------------------------------------------------------
// Evidence

void add_evidence(std::vector<EvidenceLine>& out, const std::optional<EvidenceLine>& e,
                  const std::string& note = {}) {
    if (!e || e->line == 0) return;
    EvidenceLine copy = *e;
    if (!note.empty()) copy.note = note;
    for (EvidenceLine& have : out) {
        if (have.line == copy.line && have.text == copy.text) {
            if (!copy.note.empty() && !contains(have.note, copy.note)) {
                have.note += have.note.empty() ? copy.note : "; " + copy.note;
            }
            return;
        }
    }
    out.push_back(std::move(copy));
}

std::string sighting_note(const Sighting& o, const char* which) {
    std::string note = std::string(which) + " OOM (" + phase_label(o.phase);
    if (o.step && is_training_phase(o.phase)) note += ", step " + std::to_string(*o.step);
    if (o.step && o.phase == Phase::kSample) note += " at step " + std::to_string(*o.step);
    if (o.kind == OomKind::kLibrary) note += ", cuBLAS/cuDNN allocation";
    if (o.kind == OomKind::kHost) note += ", host RAM";
    if (o.skipped) note += ", batch skipped";
    return note + ")";
}

std::optional<EvidenceLine> noted(const std::optional<Noted<std::int64_t>>& v,
                                  const std::string& note) {
    if (!v) return std::nullopt;
    EvidenceLine e = v->where;
    e.note = note;
    return e;
}

std::optional<EvidenceLine> noted(const std::optional<Noted<bool>>& v, const std::string& note) {
    if (!v) return std::nullopt;
    EvidenceLine e = v->where;
    e.note = note;
    return e;
}

// ---------------------------------------------------------------------------------------------
// From the facts to the diagnosis

Diagnosis diagnose(LogFacts facts, std::string_view source_name) {
    Diagnosis d;
    d.source_name = std::string(source_name);
    d.line_count = facts.line_count;
    d.tool = facts.tool;
    d.loom_changes = facts.loom_changes;
    d.loom_outcome = facts.loom_outcome;
    const std::vector<Sighting>& sightings = facts.sightings;
    const Settings& settings = facts.settings;
    d.oom_count = sightings.size();
    d.figures = facts.figures;
    for (const Sighting& o : sightings) {
        if (!o.figures.empty()) {
            d.figures = o.figures;
            break;
        }
    }

    if (sightings.empty() && facts.loom_outcome.empty()) {
        d.log_case = LogCase::kNoOom;
        d.title = "no out-of-memory error in this log";
        d.reason = "none of " + plural(static_cast<std::int64_t>(facts.line_count), "line") +
                   " reports an OOM (CUDA out of memory, OutOfMemoryError, OOM during training "
                   "step, CUBLAS/CUDNN_STATUS_ALLOC_FAILED, loom's out-of-memory warnings)";
        add_evidence(d.evidence, facts.last_error);
        return d;
    }

    CaseBuilder builder(d, settings, sightings, facts.successes_after_oom,
                        facts.abort_line.has_value());
    for (const LoomChange& c : facts.loom_changes) {
        if (!sightings.empty() && c.line >= sightings.front().where.line) {
            builder.set_loom_answer(&c);
            break;
        }
    }
    builder.build();
    for (const LoomChange& c : facts.loom_changes) {
        if (!c.knob.empty() && contains(d.first_change, "`" + c.knob)) {
            d.first_change +=
                " (loom already made this change, line " + std::to_string(c.line) + ")";
            break;
        }
    }
    for (const Sighting& o : sightings) {
        if (is_training_phase(o.phase) && o.step) {
            d.oom_step = o.step;
            break;
        }
    }

    // Evidence: the first OOM, what led to it, what followed, and the settings the case rests on.
    std::vector<EvidenceLine>& ev = d.evidence;
    if (!sightings.empty()) {
        const Sighting& first = sightings.front();
        add_evidence(ev, first.where, sighting_note(first, "first"));
        if (first.phase_marker && !is_training_phase(first.phase)) {
            add_evidence(ev, first.phase_marker,
                         std::string("the ") + phase_label(first.phase) + " starts");
        }
        add_evidence(ev, first.last_success);
        for (std::size_t i = 1; i < sightings.size() && i < 4; ++i) {
            add_evidence(ev, sightings[i].where, sighting_note(sightings[i], "another"));
        }
    }
    add_evidence(ev, facts.first_success_after_oom);
    add_evidence(ev, facts.abort_line);
    add_evidence(ev, facts.outcome_line);
    switch (d.log_case) {
        case LogCase::kWorkerState:
            add_evidence(ev, noted(settings.batch_size, "batch size"));
            add_evidence(ev, noted(settings.gradient_checkpointing, "gradient checkpointing"));
            add_evidence(ev, noted(settings.max_resolution, "largest resolution"));
            break;
        case LogCase::kEarlySteps:
        case LogCase::kSometimes:
            add_evidence(ev, noted(settings.gradient_checkpointing, "gradient checkpointing"));
            add_evidence(ev, noted(settings.batch_size, "batch size"));
            add_evidence(ev, noted(settings.max_resolution, "largest resolution"));
            break;
        case LogCase::kVideoFrames:
            add_evidence(ev, noted(settings.num_frames, "frames per clip"));
            add_evidence(ev, settings.video_arch);
            break;
        case LogCase::kBeforeStep1: add_evidence(ev, noted(settings.low_vram, "low_vram")); break;
        default: break;
    }
    // Keep the most telling lines (the order above), then show them in file order.
    if (ev.size() > kMaxEvidence) ev.resize(kMaxEvidence);
    std::stable_sort(ev.begin(), ev.end(),
                     [](const EvidenceLine& a, const EvidenceLine& b) { return a.line < b.line; });
    return d;
}

}  // namespace

const char* to_string(LogCase c) {
    switch (c) {
        case LogCase::kNoOom: return "no_oom";
        case LogCase::kBeforeStep1: return "before_step_1";
        case LogCase::kEarlySteps: return "early_steps";
        case LogCase::kSamplingOnly: return "sampling_only";
        case LogCase::kSometimes: return "sometimes";
        case LogCase::kVideoFrames: return "video_frames";
        case LogCase::kWorkerState: return "worker_state";
    }
    return "no_oom";
}

const char* to_string(LogTool tool) {
    switch (tool) {
        case LogTool::kUnknown: return "unknown";
        case LogTool::kLoom: return "loom";
        case LogTool::kAiToolkit: return "ai-toolkit";
        case LogTool::kPyTorch: return "pytorch";
        case LogTool::kKohya: return "kohya";
    }
    return "unknown";
}

Diagnosis diagnose_log(std::string_view text, std::string_view source_name) {
    LogScanner scanner;
    std::size_t start = 0;
    while (start < text.size()) {
        std::size_t end = text.find('\n', start);
        if (end == std::string_view::npos) end = text.size();
        scanner.feed(text.substr(start, end - start));
        start = end + 1;
    }
    return diagnose(scanner.finish(), source_name);
}

Diagnosis diagnose_log_file(const std::filesystem::path& path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
        throw IoError(path.string(), std::filesystem::exists(path, ec) ? "is not a regular file"
                                                                       : "no such log file");
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) throw IoError(path.string(), "cannot be opened for reading");
    LogScanner scanner;
    std::string line;
    while (std::getline(in, line)) scanner.feed(line);
    if (in.bad()) throw IoError(path.string(), "could not be read");
    return diagnose(scanner.finish(), path.string());
}

}  // namespace loom::guard
