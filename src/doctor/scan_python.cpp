// The Python trainers' lines for the log scanner (log_scanner.h): ai-toolkit's, kohya
// sd-scripts' and diffusers scripts' progress bars, the lines that start a phase, tracebacks,
// and their out-of-memory lines.

#include <array>
#include <initializer_list>
#include <utility>

#include "host_kill_line.h"
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
        if (tb > 0 && !is_rich_traceback_line(s)) scan_segment(s.substr(0, tb));
        // Windows prints the same traceback twice, interleaved: keep what the first one found.
        if (!in_traceback_) {
            traceback_phase_ = Phase::kNone;
            traceback_frame_.reset();
            traceback_placement_.reset();
        }
        in_traceback_ = true;
        return true;
    }
    if (!in_traceback_) return false;
    const bool indented = raw.front() == ' ' || raw.front() == '\t';
    if (indented || starts_with(s, "File \"") || starts_with(s, "During handling") ||
        starts_with(s, "The above exception") || is_rich_traceback_line(s)) {
        const Phase p = traceback_line_phase(s);
        if (traceback_phase_rank(p) > traceback_phase_rank(traceback_phase_)) {
            traceback_phase_ = p;
            traceback_frame_ = here(s);
        }
        if (!traceback_placement_ && is_placement_frame(s)) traceback_placement_ = here(s);
        return true;
    }
    return false;  // the exception line: read it like any other, then close the traceback
}

// A traceback says where the OOM it ends with happened better than the lines before it did.
void LogScanner::close_traceback() {
    in_traceback_ = false;
    bool by_placement = false;
    if (traceback_phase_ == Phase::kNone && traceback_placement_) {
        // Only a model moving to the device: the load (placement), not "unknown".
        traceback_phase_ = Phase::kLoad;
        traceback_frame_ = traceback_placement_;
        by_placement = true;
    }
    if (sightings_.empty() || success_since_oom_ || traceback_phase_ == Phase::kNone) return;
    Sighting& last = sightings_.back();
    if (last.explicit_phase || last.kind == OomKind::kHost) return;
    const Phase before = last.phase;
    last.phase = traceback_phase_ == Phase::kSample && !last.success_before ? Phase::kFirstSample
                                                                            : traceback_phase_;
    if (last.phase != phase_marker_phase_) last.phase_marker.reset();
    // The frame is evidence when it, not a line before the traceback, says where.
    if (traceback_frame_ && (before != last.phase || !last.phase_marker)) {
        last.frame = traceback_frame_;
        last.frame->note =
            by_placement ? std::string(
                               "traceback frame: a model moving to the "
                               "device (load phase)")
                         : std::string("traceback frame: ") + to_string(last.phase) + " phase";
    }
    if (last.phase == Phase::kTrainStep && !last.step) last.step = next_step();
    if (last.phase == Phase::kSample) last.step = last_bar_;  // samples run after that step
}

// ---- progress bars and phase markers

bool LogScanner::scan_progress(std::string_view s) {
    const std::optional<BarUpdate> bar = parse_tqdm(s);
    if (!bar) return scan_progress_text(s);
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
    // A first update that already reports a loss counts a finished step (OneTrainer restarts its
    // bar every epoch); one without is where the bar starts (0, or the resume step).
    hold_or_count(bar->n, s, !contains(bar->postfix, "loss"));
    return true;
}

// diffusion-pipe (DeepSpeed) logs steps as text: "steps: 20 loss: 0.0812 iter time (s): 6.312".
bool LogScanner::scan_progress_text(std::string_view s) {
    const std::string_view msg = strip_log_prefix(s);
    if (!starts_with(msg, "steps: ") || !contains(msg, " loss: ")) return false;
    const std::optional<std::int64_t> n = leading_int(msg.substr(7));
    if (!n) return false;
    hold_or_count(*n, s, false);
    return true;
}

void LogScanner::scan_phase_markers(std::string_view s) {
    const std::string lower = lower_ascii(strip_log_prefix(s));
    const auto any = [&](std::initializer_list<std::string_view> words) {
        for (std::string_view w : words) {
            if (contains(lower, w)) return true;
        }
        return false;
    };
    const auto starts = [&](std::initializer_list<std::string_view> words) {
        for (std::string_view w : words) {
            if (starts_with(lower, w)) return true;
        }
        return false;
    };
    if (contains(s, "Error during sampling, proceeding without sampling")) {
        // OneTrainer survives a sampling error: the traceback just above it was sampling.
        if (!sightings_.empty() && !sightings_.back().explicit_phase &&
            sightings_.back().kind != OomKind::kHost && !success_since_oom_) {
            Sighting& last = sightings_.back();
            last.phase = last.success_before ? Phase::kSample : Phase::kFirstSample;
            if (last.phase == Phase::kSample) last.step = last_bar_;
        }
        return;
    }
    if (any({"generating baseline samples", "generating first sample"})) {
        set_phase(Phase::kFirstSample, s);
    } else if (any({"generating images", "generating samples", "generating sample images",
                    "running validation", "sampling images"}) ||
               starts({"sampling:", "sampling "})) {
        const Phase p = sampling_phase();
        if (phase_ != p) set_phase(p, s);
    } else if (any({"caching latents", "caching text", "cache latents", "precomputing text",
                    "vae cache", "caching:"})) {
        set_phase(Phase::kCache, s);
    } else if (starts({"loading ", "quantizing", "- quantizing"}) ||
               any({"load stablediffusion checkpoint", "loading model for process",
                    "loading pipeline"}) ||
               (starts({"moving ", "move "}) && any({"cuda", "gpu", "device"}))) {
        set_phase(Phase::kLoad, s);
    } else if (starts({"saving at step", "saving checkpoint", "saving model"}) ||
               contains(lower, "saving checkpoint:")) {
        set_phase(Phase::kSave, s);
    } else if (any({"running training", "***** running training *****"})) {
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
    if (scan_host_kill(s)) return;
    OomKind kind = classify_message(s);
    if (kind == OomKind::kNotOom && contains(s, "OutOfMemoryError")) kind = OomKind::kDevice;
    if (kind == OomKind::kNotOom) {
        // The first error is the cause; a launcher's CalledProcessError only reports it.
        if (in_traceback_ && (!last_error_ || contains(last_error_->text, "CalledProcessError"))) {
            last_error_ = here(s, "error, not an out-of-memory one");
        }
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
        open_wrap(s);
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
    open_wrap(s);
}

// The kernel's OOM killer, a shell's `Killed`, exit 137 / -9, SIGKILL, the CPU allocator: host
// RAM. The same death told again (dmesg, then the shell, then the launcher) is one OOM, and a
// device OOM before it stays the first.
bool LogScanner::scan_host_kill(std::string_view s) {
    if (!is_host_kill_line(s) && classify_message(s) != OomKind::kHost) return false;
    if (!sightings_.empty() && !success_since_oom_ && !change_since_oom_) {
        Sighting& last = sightings_.back();
        // The kernel's own "Out of memory: Killed process" says most; else the first echo.
        const bool better = !last.echo || (contains(s, "Out of memory: Kill") &&
                                           !contains(last.echo->text, "Out of memory: Kill"));
        if (last.kind == OomKind::kHost && better && last.where.line != line_) {
            last.echo = here(s, "the same death, told again (kernel, shell or launcher)");
        }
        return true;
    }
    Sighting o;
    o.where = here(s);
    o.phase = phase_;
    o.kind = OomKind::kHost;
    if (phase_ == Phase::kTrainStep) o.step = next_step();
    if (phase_ == Phase::kSample) o.step = last_bar_;
    add_sighting(std::move(o));
    return true;
}

// ---- an OOM message wrapped over several lines (a narrow console, rich's tracebacks)

void LogScanner::open_wrap(std::string_view s) {
    wrap_target_ = sightings_.size() - 1;
    wrap_text_ = std::string(s);
    wrap_tight_ = wrap_text_;
    wrap_lines_ = 0;
}

// Returns true when `s` continues the OOM message just read; its figures are read again from
// the joined text (with a space, then without one for a wrap inside a word).
bool LogScanner::continue_wrapped(std::string_view s) {
    static constexpr std::array<std::string_view, 22> kWords = {
        "GiB",       "MiB",     "KiB",           "bytes",         "free",
        "capacity",  "capacty", "allocated",     "reserved",      "PyTorch",
        "Process",   "memory",  "fragmentation", "documentation", "PYTORCH_CUDA_ALLOC_CONF",
        "max_split", "in use",  "of which",      "Including",     "unallocated",
        "(GPU",      "GPU "};
    constexpr int kMaxWrappedLines = 8;
    if (wrap_lines_ >= kMaxWrappedLines || *wrap_target_ >= sightings_.size()) return false;
    if (contains(s, "%|") || contains(s, "Traceback") || starts_with(s, "File \"") ||
        is_rich_traceback_line(s) || classify_message(s) != OomKind::kNotOom ||
        contains(s, "Error:") || contains(s, "Error running job")) {
        return false;
    }
    bool word = false;
    for (std::string_view w : kWords) word = word || contains(s, w);
    if (!word) return false;
    ++wrap_lines_;
    wrap_text_ += ' ';
    wrap_text_ += s;
    wrap_tight_ += s;
    Sighting& o = sightings_[*wrap_target_];
    const std::size_t line = o.figures.empty() ? o.where.line : o.figures.line;
    const bool first_figures = figures_.empty() || figures_.line == line;
    OomFigures f;
    const bool spaced = read_figures(wrap_text_, f);
    if (read_figures(wrap_tight_, f) || spaced) {
        f.line = line;
        o.figures = f;
        if (first_figures) figures_ = std::move(f);
    }
    return true;
}

}  // namespace loom::doctor::detail
