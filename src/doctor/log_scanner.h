#pragma once

// One pass over a log's lines that collects facts: which tool wrote it, every OOM sighting with
// its phase and step, the training steps that succeeded, the memory settings the log printed,
// and loom's own changes and outcome. Recognises loom's console, loom.log and events.jsonl,
// ai-toolkit, kohya sd-scripts and plain PyTorch scripts. It judges nothing: case_builder.h
// turns the facts into the guide's case. Internal to the doctor layer.
//
// The class is one pass; its readers live one concept per file: log_scanner.cpp (lines,
// segments, progress and sightings), scan_events.cpp (events.jsonl), scan_loom_lines.cpp (loom's
// console and loom.log, through the guard's log wording), scan_settings.cpp (the tool vote and
// printed settings) and scan_python.cpp (the Python trainers' bars, markers, tracebacks, OOMs).

#include <nlohmann/json_fwd.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/device/oom_classify.h"
#include "loom/device/phase.h"
#include "loom/doctor/diagnosis.h"

namespace loom::doctor::detail {

// An out-of-memory error seen in the log.
struct Sighting {
    EvidenceLine where;
    Phase phase = Phase::kNone;
    bool explicit_phase = false;  // loom said it; tracebacks do not override it
    std::optional<std::int64_t> step;
    OomKind kind = OomKind::kDevice;
    bool skipped = false;         // ai-toolkit dropped the batch and went on
    bool success_before = false;  // a training step had succeeded before it
    bool mergeable = false;       // a plain message a traceback may repeat
    std::optional<EvidenceLine> last_success;
    std::optional<EvidenceLine> phase_marker;  // the line that started `phase`, when one did
    std::optional<EvidenceLine> frame;         // the traceback frame that named `phase`
    std::optional<EvidenceLine> echo;          // host RAM: another line telling the same death
    OomFigures figures;
};

// A setting's value with the line that printed it.
template <class T>
struct Noted {
    T value{};
    EvidenceLine where;
};

// Settings the log printed (ai-toolkit's config dump, YAML, kohya/diffusers flags and summaries).
struct Settings {
    std::optional<Noted<std::int64_t>> batch_size;  // the largest seen
    std::optional<Noted<bool>> gradient_checkpointing;
    std::optional<Noted<std::int64_t>> max_resolution;
    std::optional<Noted<std::int64_t>> num_frames;  // the largest seen
    std::optional<Noted<bool>> low_vram;
    std::optional<EvidenceLine> video_arch;

    bool is_video() const {
        if (num_frames) return num_frames->value > 1;
        return video_arch.has_value();
    }
};

// What the scan found, for the diagnosis.
struct LogFacts {
    std::size_t line_count = 0;
    LogTool tool = LogTool::kUnknown;
    std::vector<Sighting> sightings;  // in line order; a repeated message counts once
    OomFigures figures;               // the first figures anywhere (also outside sightings)
    Settings settings;
    std::int64_t successes_after_oom = 0;  // after an OOM, without a loom change in between
    std::optional<EvidenceLine> first_success_after_oom;
    std::optional<EvidenceLine> abort_line;  // the trainer gave up after repeated OOMs
    std::optional<EvidenceLine> last_error;  // a non-OOM exception ending a traceback
    std::vector<LoomChange> loom_changes;
    std::string loom_outcome;  // as Diagnosis::loom_outcome
    std::optional<EvidenceLine> outcome_line;
    std::string loom_recovered;  // as Diagnosis::loom_recovered
};

// Not thread-safe; one scanner per log.
class LogScanner {
  public:
    // One physical line (without '\n'). tqdm redraws a bar with '\r', so a line holds several
    // updates: each '\r'-separated segment is read on its own, with the line's number.
    void feed(std::string_view line);

    // The facts, once the last line is fed. Call once: the scanner hands its findings over.
    LogFacts finish();

  private:
    EvidenceLine here(std::string_view s, std::string note = {}) const;

    void scan_segment(std::string_view raw);
    bool scan_json(std::string_view s);
    void scan_json_event(const nlohmann::json& j, std::string_view s);
    bool scan_traceback(std::string_view raw, std::string_view s);
    void close_traceback();
    void vote_tool(std::string_view s);
    LogTool elected_tool() const;
    void read_settings(std::string_view s);
    void read_resolution(std::string_view s);
    void read_video_arch(std::string_view s);
    bool scan_loom_line(std::string_view s);
    bool scan_loom_oom(std::string_view s);
    bool scan_loom_change(std::string_view s);
    bool scan_loom_outcome(std::string_view s);
    bool scan_loom_recovered(std::string_view s);
    void set_outcome(const std::string& what, const std::string& message, std::string_view s);
    void add_change(LoomChange c);
    // A data-parallel loom run: every rank logs the agreed OOM and plan change. True when this
    // line, from another rank, is one of those already counted from the first.
    bool echo_of_another_rank(std::string_view s);
    bool scan_progress(std::string_view s);
    void scan_phase_markers(std::string_view s);
    void scan_oom(std::string_view s);
    bool scan_host_kill(std::string_view s);
    bool scan_progress_text(std::string_view s);
    bool continue_wrapped(std::string_view s);
    void open_wrap(std::string_view s);
    void hold_or_count(std::int64_t n, std::string_view s, bool first_is_baseline);
    void flush_held_bar();
    void settle_held_bar();

    void on_progress(std::int64_t n, std::string_view s, bool first_is_baseline);
    void record_success(std::int64_t step, const EvidenceLine& where);
    void add_sighting(Sighting sighting);
    void set_phase(Phase phase, std::string_view s);
    Phase sampling_phase() const { return successes_ > 0 ? Phase::kSample : Phase::kFirstSample; }
    std::int64_t next_step() const { return std::max(last_bar_, skipped_through_.value_or(0)) + 1; }

    std::size_t line_ = 0;
    std::optional<int> line_rank_;  // the rank the line's launcher prefix names
    // A line's text → how often each rank logged it (echo_of_another_rank).
    std::map<std::string, std::map<int, int>> rank_lines_;
    std::array<int, 5> votes_{};  // by LogTool

    Phase phase_ = Phase::kNone;
    std::optional<EvidenceLine> phase_marker_;
    Phase phase_marker_phase_ = Phase::kNone;
    std::string job_name_;      // ai-toolkit "# Running job: NAME": its bar's description
    std::string training_bar_;  // the description of the bar known to count steps
    std::optional<std::int64_t> bar_baseline_;
    std::int64_t last_bar_ = 0;
    std::optional<std::int64_t> skipped_through_;  // ai-toolkit: last step whose batch was dropped

    std::int64_t successes_ = 0;
    std::optional<EvidenceLine> last_success_;
    bool success_since_oom_ = false;
    bool change_since_oom_ = false;
    std::int64_t successes_after_oom_ = 0;  // without a loom change in between
    std::optional<EvidenceLine> first_success_after_oom_;

    bool in_traceback_ = false;
    Phase traceback_phase_ = Phase::kNone;
    std::optional<EvidenceLine> traceback_frame_;      // the frame that named traceback_phase_
    std::optional<EvidenceLine> traceback_placement_;  // a frame moving a model to the device

    // An OOM message the console wrapped over several lines: its text so far, for the figures.
    std::optional<std::size_t> wrap_target_;  // index into sightings_
    std::string wrap_text_;
    std::string wrap_tight_;  // the same joined without spaces (a wrap inside a word)
    int wrap_lines_ = 0;

    // A training bar printed after a Python OOM (tqdm flushes its last redraw when the process
    // dies): a step that finished before the OOM, unless more progress follows.
    struct HeldBar {
        std::int64_t n = 0;
        EvidenceLine where;
    };
    std::optional<HeldBar> held_bar_;
    std::optional<EvidenceLine> last_error_;  // a non-OOM exception ending a traceback

    std::vector<Sighting> sightings_;
    std::optional<EvidenceLine> abort_line_;
    OomFigures figures_;  // the first figures anywhere, when the sightings have none
    Settings settings_;
    bool in_resolution_list_ = false;  // inside a multi-line "resolution": [ ... ] list
    EvidenceLine resolution_start_;

    std::vector<LoomChange> changes_;
    std::string loom_outcome_;
    std::optional<EvidenceLine> outcome_line_;
    std::string loom_recovered_;
};

}  // namespace loom::doctor::detail
