// loom's own console and loom.log lines for the log scanner (log_scanner.h), read through the
// guard's log wording (loom/guard/log_wording.h) — the same module that writes them: the OOM
// warnings, plan changes, how a stopped run ended, the summary of a run that recovered, and the
// step lines.

#include <utility>

#include "log_scanner.h"
#include "log_text.h"
#include "loom/guard/log_wording.h"
#include "oom_message_figures.h"
#include "progress_line.h"

namespace loom::doctor::detail {

bool LogScanner::scan_loom_line(std::string_view s) {
    if (scan_loom_outcome(s) || scan_loom_oom(s) || scan_loom_change(s) || scan_loom_recovered(s)) {
        votes_[static_cast<int>(LogTool::kLoom)] += 3;
        return true;
    }
    if (const std::optional<std::int64_t> n = parse_loom_step(s)) {
        votes_[static_cast<int>(LogTool::kLoom)] += 1;
        on_progress(*n, s, false);
        return true;
    }
    return false;
}

// "out of memory in train_step at step 3 (device): <message>"
bool LogScanner::scan_loom_oom(std::string_view s) {
    const std::optional<guard::OomLine> line = guard::parse_oom_line(s);
    if (!line) return false;
    if (echo_of_another_rank(s)) return true;
    Sighting o;
    o.where = here(s);
    o.phase = line->phase;
    o.explicit_phase = true;
    o.step = line->step;
    o.kind = line->kind;
    if (read_figures(line->message, o.figures)) o.figures.line = line_;
    add_sighting(std::move(o));
    return true;
}

// "plan change: train.batch_size 2 -> 1, train.gradient_accumulation 1 -> 2 (rule: <id>) — why"
bool LogScanner::scan_loom_change(std::string_view s) {
    const std::optional<guard::PlanChangeLine> line = guard::parse_plan_change_line(s);
    if (!line) return false;
    if (echo_of_another_rank(s)) return true;
    for (const guard::KnobChange& k : line->changes) {
        add_change({line_, k.knob, k.from, k.to, line->rule, line->reason, "", std::nullopt});
    }
    change_since_oom_ = true;  // also "no change, retry": loom acted on the OOM
    return true;
}

// "error: does not fit: ..." / "error: worker state: ..." / "error: host RAM ran out in ..."
// (the console's last line).
bool LogScanner::scan_loom_outcome(std::string_view s) {
    if (const std::optional<guard::OutcomeLine> outcome = guard::parse_outcome_line(s)) {
        const bool fits = outcome->kind == guard::OutcomeLine::Kind::kDoesNotFit;
        set_outcome(fits ? "does not fit" : "worker state", outcome->message, s);
        // With oom.enabled false the message carries the OOM itself: "out of memory in ...".
        if (const std::optional<guard::OomDisabledLine> oom =
                guard::parse_oom_disabled_line(outcome->message)) {
            // The console printed the OOM's WARN line just before: the same OOM, not another.
            if (!sightings_.empty() && !success_since_oom_ && !change_since_oom_ &&
                sightings_.back().explicit_phase && sightings_.back().phase == oom->phase &&
                sightings_.back().step == oom->step) {
                return true;
            }
            Sighting o;
            o.where = here(s);
            o.phase = oom->phase;
            o.explicit_phase = true;
            o.step = oom->step;
            const OomKind kind = classify_message(oom->message);
            o.kind = kind == OomKind::kNotOom ? OomKind::kDevice : kind;
            if (read_figures(oom->message, o.figures)) o.figures.line = line_;
            add_sighting(std::move(o));
        } else {
            scan_loom_oom(s);
        }
        return true;
    }
    if (guard::parse_host_memory_line(s) &&
        (contains(s, guard::kErrorPrefix) || contains(s, "[error]"))) {
        set_outcome("host memory", std::string(s.substr(s.find("host RAM ran out in "))), s);
        return true;
    }
    return false;
}

// "1 out-of-memory errors recovered with 1 plan changes, 0 steps lost; final plan: ..." (the
// trainer's last INFO line) or "(1 out-of-memory errors recovered, 1 plan changes, 0 steps
// lost)" (`loom train`'s summary on stdout).
bool LogScanner::scan_loom_recovered(std::string_view s) {
    const std::optional<guard::RecoveredLine> line = guard::parse_recovered_line(s);
    if (!line) return false;
    loom_recovered_ = guard::recovered_counts_text(*line);
    return true;
}

void LogScanner::set_outcome(const std::string& what, const std::string& message,
                             std::string_view s) {
    loom_outcome_ = evidence_text(message.empty() ? what : what + ": " + message);
    outcome_line_ = here(s, "loom stopped: " + what);
    // "shows 0 bytes free of 96.00 MiB before loom allocated anything"
    if (figures_.empty() && read_figures(message, figures_)) figures_.line = line_;
}

// The ranks of a loom data-parallel run agree on each OOM (rank 0 decides from the first failing
// rank's event, every rank logs that event and the change): the n-th copy of a line is a new
// event only on the first rank to log it n times.
bool LogScanner::echo_of_another_rank(std::string_view s) {
    if (!line_rank_) return false;
    std::map<int, int>& seen = rank_lines_[std::string(s)];
    const int mine = ++seen[*line_rank_];
    for (const auto& [rank, count] : seen) {
        if (rank != *line_rank_ && count >= mine) return true;
    }
    return false;
}

void LogScanner::add_change(LoomChange c) {
    if (c.phase.empty() && !sightings_.empty()) {
        c.phase = to_string(sightings_.back().phase);
        if (!c.step) c.step = sightings_.back().step;
    }
    changes_.push_back(std::move(c));
}

}  // namespace loom::doctor::detail
