// The log scanner (log_scanner.h). Each '\r'-separated segment goes, in order, to loom's
// events.jsonl, traceback frames, the tool vote, printed settings, then either loom's own lines
// or the Python trainers' progress bars, phase markers and OOM lines. Where an OOM happened is
// read from the lines before it (the phase the trainer announced, the step its bar reached) and
// corrected by the traceback that ends with it. This file holds the pass itself: lines and
// segments, successful steps, sightings and the facts handed over at the end.

#include "log_scanner.h"

#include <utility>

#include "log_text.h"

namespace loom::doctor::detail {

namespace {

// The first phase named in `text` as a word ("... in train_step at step 3 ...").
std::optional<Phase> phase_named_in(std::string_view text) {
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (!is_alpha(text[i]) || (i > 0 && is_word_char(text[i - 1]))) continue;
        std::size_t end = i;
        while (end < text.size() && is_word_char(text[end])) ++end;
        if (const std::optional<Phase> p = parse_phase(text.substr(i, end - i))) return p;
        i = end;
    }
    return std::nullopt;
}

}  // namespace

void LogScanner::feed(std::string_view line) {
    ++line_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::size_t start = 0;
    while (start <= line.size()) {
        std::size_t end = line.find('\r', start);
        if (end == std::string_view::npos) end = line.size();
        const std::string_view segment = line.substr(start, end - start);
        if (segment.find('\x1b') != std::string_view::npos) {
            const std::string clean = strip_ansi(segment);
            line_rank_ = rank_in_prefix(clean);
            scan_segment(strip_rank_prefix(clean));
        } else {
            line_rank_ = rank_in_prefix(segment);
            scan_segment(strip_rank_prefix(segment));
        }
        start = end + 1;
    }
}

EvidenceLine LogScanner::here(std::string_view s, std::string note) const {
    if (line_rank_) {  // several ranks: the evidence says whose line it is
        return {line_, evidence_text("[rank" + std::to_string(*line_rank_) + "] " + std::string(s)),
                std::move(note)};
    }
    return {line_, evidence_text(s), std::move(note)};
}

void LogScanner::scan_segment(std::string_view raw) {
    const std::string_view s = trim(raw);
    if (s.empty()) return;
    if (wrap_target_ && continue_wrapped(s)) return;
    wrap_target_.reset();
    if (s.front() == '{' && scan_json(s)) return;
    vote_tool(s);
    if (scan_traceback(raw, s)) return;
    read_settings(s);
    if (!scan_loom_line(s)) {
        scan_progress(s);
        scan_phase_markers(s);
        scan_oom(s);
    }
    if (in_traceback_) close_traceback();
}

// ---- training progress and sightings

void LogScanner::on_progress(std::int64_t n, std::string_view s, bool first_is_baseline) {
    if (phase_ != Phase::kTrainStep) set_phase(Phase::kTrainStep, s);
    if (!bar_baseline_) {
        // A bar starts at its initial value (0, or the resume step): nothing trained yet.
        bar_baseline_ = first_is_baseline ? n : 0;
        if (first_is_baseline) {
            last_bar_ = n;
            return;
        }
    }
    if (n <= last_bar_) return;  // a redraw
    last_bar_ = n;
    // ai-toolkit moves the bar past a dropped batch too: that step did not succeed.
    if (skipped_through_ && n <= *skipped_through_) return;
    record_success(n, here(s));
}

void LogScanner::record_success(std::int64_t step, const EvidenceLine& where) {
    ++successes_;
    last_success_ = where;
    last_success_->note =
        "last successful training step before the OOM (step " + std::to_string(step) + ")";
    success_since_oom_ = true;
    if (!sightings_.empty() && !change_since_oom_) {
        ++successes_after_oom_;
        if (!first_success_after_oom_) {
            first_success_after_oom_ = where;
            first_success_after_oom_->note =
                "training went on after the OOM (step " + std::to_string(step) + ")";
        }
    }
}

// ---- a training bar printed after a Python OOM

// The bar is held while it may be the dying process's last redraw; a later bar that moves on
// proves training went on, and both count as successes.
void LogScanner::hold_or_count(std::int64_t n, std::string_view s, bool first_is_baseline) {
    if (held_bar_ && n > held_bar_->n) flush_held_bar();
    const bool may_be_late = !sightings_.empty() && !success_since_oom_ && !change_since_oom_ &&
                             !held_bar_ && (bar_baseline_ ? n > last_bar_ : n > 0);
    if (may_be_late) {
        const Sighting& last = sightings_.back();
        const bool python_oom = !last.explicit_phase && !last.skipped;
        if (python_oom && (last.phase == Phase::kNone || last.phase == Phase::kTrainStep ||
                           last.phase == Phase::kFirstSample || last.kind == OomKind::kHost)) {
            held_bar_ = HeldBar{n, here(s)};
            return;
        }
    }
    on_progress(n, s, first_is_baseline);
}

void LogScanner::flush_held_bar() {
    if (!held_bar_) return;
    const HeldBar held = std::move(*held_bar_);
    held_bar_.reset();
    if (!bar_baseline_) bar_baseline_ = 0;
    last_bar_ = held.n;
    phase_ = Phase::kTrainStep;
    record_success(held.n, held.where);
}

// No progress followed: the held bar was the last redraw of steps done before the OOM.
void LogScanner::settle_held_bar() {
    if (!held_bar_) return;
    const HeldBar held = std::move(*held_bar_);
    held_bar_.reset();
    if (!bar_baseline_) bar_baseline_ = 0;
    last_bar_ = held.n;
    ++successes_;
    Sighting& last = sightings_.back();
    last.success_before = true;
    last.last_success = held.where;
    last.last_success->note = "step " + std::to_string(held.n) +
                              " had finished: the bar was printed after the error (last "
                              "successful training step before the OOM)";
    if (last.kind == OomKind::kHost) return;
    if (last.phase == Phase::kFirstSample) {
        last.phase = Phase::kSample;
        last.step = held.n;
    } else {
        last.phase = Phase::kTrainStep;
        last.step = held.n + 1;
    }
}

void LogScanner::set_phase(Phase phase, std::string_view s) {
    phase_ = phase;
    phase_marker_ = here(s);
    phase_marker_phase_ = phase;
}

void LogScanner::add_sighting(Sighting o) {
    flush_held_bar();  // progress between two OOMs: training went on
    o.success_before = successes_ > 0;
    // loom numbers steps from 1 and names the one that failed: steps before it succeeded.
    if (o.explicit_phase && o.step && *o.step > 1) o.success_before = true;
    if (o.explicit_phase && o.phase == Phase::kSample) o.success_before = true;
    o.last_success = last_success_;
    if (!o.explicit_phase && phase_marker_phase_ == o.phase) o.phase_marker = phase_marker_;
    if (figures_.empty() && !o.figures.empty()) figures_ = o.figures;
    sightings_.push_back(std::move(o));
    success_since_oom_ = false;
    change_since_oom_ = false;
}

LogFacts LogScanner::finish() {
    if (in_traceback_) close_traceback();
    settle_held_bar();
    if (sightings_.empty() && outcome_line_ && !starts_with(loom_outcome_, "worker state")) {
        // The OOM lines are not in this log (a tail of it): loom's last word names the phase.
        Sighting o;
        o.where = *outcome_line_;
        o.phase = phase_named_in(loom_outcome_).value_or(Phase::kTrainStep);
        o.explicit_phase = true;
        o.kind = starts_with(loom_outcome_, "host memory") ? OomKind::kHost : OomKind::kDevice;
        o.success_before = successes_ > 0;
        sightings_.push_back(std::move(o));
    }
    LogFacts facts;
    facts.line_count = line_;
    facts.tool = elected_tool();
    facts.sightings = std::move(sightings_);
    facts.figures = std::move(figures_);
    facts.settings = std::move(settings_);
    facts.successes_after_oom = successes_after_oom_;
    facts.first_success_after_oom = std::move(first_success_after_oom_);
    facts.abort_line = std::move(abort_line_);
    facts.last_error = std::move(last_error_);
    facts.loom_changes = std::move(changes_);
    facts.loom_outcome = std::move(loom_outcome_);
    facts.outcome_line = std::move(outcome_line_);
    facts.loom_recovered = std::move(loom_recovered_);
    return facts;
}

}  // namespace loom::doctor::detail
