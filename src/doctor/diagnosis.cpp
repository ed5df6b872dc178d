// `loom doctor`'s judgement: the facts one pass over the log collected (log_scanner.h) become the
// user guide's case (case_builder.h) with the lines that prove it, and what loom already did.
// Printing is in diagnosis_render.cpp.

#include "loom/doctor/diagnosis.h"

#include <algorithm>
#include <fstream>
#include <utility>

#include "case_builder.h"
#include "log_scanner.h"
#include "log_text.h"
#include "loom/core/error.h"
#include "loom/device/oom_classify.h"
#include "loom/device/phase.h"

namespace loom::doctor {

namespace {

using detail::CaseBuilder;
using detail::contains;
using detail::is_training_phase;
using detail::LogFacts;
using detail::LogScanner;
using detail::Noted;
using detail::phase_label;
using detail::plural;
using detail::Settings;
using detail::Sighting;

constexpr std::size_t kMaxEvidence = 12;  // evidence lines reported

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
    d.loom_recovered = facts.loom_recovered;
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
                   "step, CUBLAS/CUDNN_STATUS_ALLOC_FAILED, loom's out-of-memory warnings) or a "
                   "host-RAM death (the OOM killer, `Killed`, exit code 137 / -9, "
                   "DefaultCPUAllocator)";
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
    if (!sightings.empty()) {
        const Phase p = sightings.front().phase;
        d.phase = p == Phase::kNone ? "unknown" : to_string(p);
    }
    const auto taken_by = [&](const LoomChange& c) {
        for (const guard::RungSpec* r : builder.first_change_rungs()) {
            if (std::find(r->knobs.begin(), r->knobs.end(), c.knob) != r->knobs.end()) return true;
        }
        return false;
    };
    for (const LoomChange& c : facts.loom_changes) {
        if (!c.knob.empty() && taken_by(c)) {
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
        add_evidence(ev, first.frame);
        add_evidence(ev, first.echo);
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
        case LogCase::kHostRam: return "host_ram";
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

}  // namespace loom::doctor
