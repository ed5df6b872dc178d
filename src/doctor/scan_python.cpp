// The Python trainers' lines for the log scanner (log_scanner.h): ai-toolkit's, kohya
// sd-scripts' and diffusers scripts' progress bars, the lines that start a phase, tracebacks,
// and their out-of-memory lines.

#include <utility>

#include "log_scanner.h"
#include "log_text.h"
#include "oom_message_figures.h"
#include "progress_line.h"
#include "traceback_phase.h"

namespace loom::doctor::detail {

// ---- Python tracebacks

// Returns true when the segment is a traceback's frame or source line (nothing else to read).
bool LogScanner::scan_traceback(std::string_view raw, std::string_view s) {
    if (const std::size_t tb = s.find("Traceback (most recent call last)");
        tb != std::string_view::npos) {
        // A tqdm bar left without its newline ("Steps: ... ]Traceback ..."): read it first.
        if (tb > 0) scan_segment(s.substr(0, tb));
        // Windows prints the same traceback twice, interleaved: keep what the first one found.
        if (!in_traceback_) traceback_phase_ = Phase::kNone;
        in_traceback_ = true;
        return true;
    }
    if (!in_traceback_) return false;
    const bool indented = raw.front() == ' ' || raw.front() == '\t';
    if (indented || starts_with(s, "File \"") || starts_with(s, "During handling") ||
        starts_with(s, "The above exception")) {
        const Phase p = traceback_line_phase(s);
        if (traceback_phase_rank(p) > traceback_phase_rank(traceback_phase_)) traceback_phase_ = p;
        return true;
    }
    return false;  // the exception line: read it like any other, then close the traceback
}

// A traceback says where the OOM it ends with happened better than the lines before it did.
void LogScanner::close_traceback() {
    in_traceback_ = false;
    if (sightings_.empty() || success_since_oom_ || traceback_phase_ == Phase::kNone) return;
    Sighting& last = sightings_.back();
    if (last.explicit_phase) return;
    last.phase = traceback_phase_ == Phase::kSample && !last.success_before ? Phase::kFirstSample
                                                                            : traceback_phase_;
    if (last.phase != phase_marker_phase_) last.phase_marker.reset();
    if (last.phase == Phase::kTrainStep && !last.step) last.step = next_step();
    if (last.phase == Phase::kSample) last.step = last_bar_;  // samples run after that step
}

// ---- progress bars and phase markers

bool LogScanner::scan_progress(std::string_view s) {
    const std::optional<BarUpdate> bar = parse_tqdm(s);
    if (!bar) return false;
    // Only the bar that counts training steps: not "Generating Images", "Loading checkpoint
    // shards", "Caching latents" or a quantization bar.
    const bool training = bar->desc == "steps" || bar->desc == "Steps" ||
                          (!training_bar_.empty() && bar->desc == training_bar_) ||
                          (!job_name_.empty() && bar->desc == job_name_) ||
                          contains(bar->postfix, "loss") || contains(bar->postfix, "lr:") ||
                          contains(bar->postfix, "lr=");
    if (!training) return false;
    if (bar->desc == "steps") votes_[static_cast<int>(LogTool::kKohya)] += 1;
    training_bar_ = std::string(bar->desc);
    on_progress(bar->n, s, true);
    return true;
}

void LogScanner::scan_phase_markers(std::string_view s) {
    if (contains(s, "Generating baseline samples") || contains(s, "Generating first sample")) {
        set_phase(Phase::kFirstSample, s);
    } else if (contains(s, "Generating Images") || contains(s, "Generating Samples") ||
               contains(s, "Generating images") || contains(s, "generating sample images") ||
               contains(s, "Running validation")) {
        const Phase p = sampling_phase();
        if (phase_ != p) set_phase(p, s);
    } else if (contains(s, "Caching latents") || contains(s, "caching latents") ||
               contains(s, "Caching text embeddings") || contains(s, "caching text encoder")) {
        set_phase(Phase::kCache, s);
    } else if (starts_with(s, "Loading ") || starts_with(s, "Quantizing") ||
               starts_with(s, "- quantizing") || contains(s, "load StableDiffusion checkpoint") ||
               contains(s, "loading model for process") || contains(s, "Loading pipeline")) {
        set_phase(Phase::kLoad, s);
    } else if (starts_with(s, "Saving at step") || contains(s, "saving checkpoint:")) {
        set_phase(Phase::kSave, s);
    } else if (contains(s, "running training") || contains(s, "***** Running training *****")) {
        set_phase(Phase::kTrainStep, s);
    }
}

// ---- OOM lines

void LogScanner::scan_oom(std::string_view s) {
    if (contains(s, "# OOM during training step")) {
        // ai-toolkit dropped this step's batch; the bar will move past it.
        Sighting o;
        o.where = here(s);
        o.phase = Phase::kTrainStep;
        o.step = next_step();
        o.skipped = true;
        skipped_through_ = o.step;
        add_sighting(std::move(o));
        return;
    }
    if (contains(s, "OOM during training step") && contains(s, "times in a row")) {
        if (!abort_line_) abort_line_ = here(s, "the run gave up after repeated OOMs");
        if (sightings_.empty() || success_since_oom_) {
            Sighting o;
            o.where = here(s);
            o.phase = Phase::kTrainStep;
            o.step = next_step();
            add_sighting(std::move(o));
        }
        return;
    }
    OomKind kind = classify_message(s);
    if (kind == OomKind::kNotOom && contains(s, "OutOfMemoryError")) kind = OomKind::kDevice;
    if (kind == OomKind::kNotOom) {
        if (in_traceback_) last_error_ = here(s, "error, not an out-of-memory one");
        return;
    }
    OomFigures figures;
    if (read_figures(s, figures)) figures.line = line_;
    // The same exception printed again ("Error running job: X", then the traceback ending in X)
    // is one OOM: keep the first line, complete its figures.
    if (!sightings_.empty() && sightings_.back().mergeable && !success_since_oom_ &&
        !change_since_oom_) {
        Sighting& last = sightings_.back();
        if (last.figures.empty() && !figures.empty()) last.figures = std::move(figures);
        if (kind == OomKind::kLibrary) last.kind = kind;
        return;
    }
    Sighting o;
    o.where = here(s);
    o.phase = phase_;
    o.kind = kind;
    o.mergeable = true;
    o.figures = std::move(figures);
    if (phase_ == Phase::kTrainStep) o.step = next_step();
    if (phase_ == Phase::kSample) o.step = last_bar_;
    add_sighting(std::move(o));
}

}  // namespace loom::doctor::detail
