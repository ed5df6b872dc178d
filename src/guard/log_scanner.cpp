// The log scanner (log_scanner.h). Each '\r'-separated segment goes, in order, to loom's
// events.jsonl, traceback frames, the tool vote, printed settings, then either loom's own lines
// or the Python trainers' progress bars, phase markers and OOM lines. Where an OOM happened is
// read from the lines before it (the phase the trainer announced, the step its bar reached) and
// corrected by the traceback that ends with it.

#include "log_scanner.h"

#include <nlohmann/json.hpp>

#include <utility>

#include "log_text.h"
#include "oom_message_figures.h"
#include "progress_line.h"
#include "traceback_phase.h"

namespace loom::guard::detail {

namespace {

constexpr std::size_t kMaxVideoScan = 4096;  // longer segments are progress spam, not config

// "device_oom" (loom's events and warnings), "device" (older wording), "library_oom", "host_oom".
OomKind kind_from_text(std::string_view kind) {
    if (starts_with(kind, "library")) return OomKind::kLibrary;
    if (starts_with(kind, "host")) return OomKind::kHost;
    return OomKind::kDevice;
}

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

struct KnobText {
    std::string knob;
    std::string from;
    std::string to;
};

// "a.b false -> true, c.d [512, 768] -> [512]": split on ", " only where a new "knob x -> y"
// starts, since values may hold commas themselves.
std::vector<KnobText> split_changes(std::string_view list) {
    std::vector<std::string> parts;
    for (std::size_t start = 0; start <= list.size();) {
        std::size_t end = list.find(", ", start);
        if (end == std::string_view::npos) end = list.size();
        const std::string_view part = list.substr(start, end - start);
        const std::size_t space = part.find(' ');
        const bool starts_change = contains(part, " -> ") && space != std::string_view::npos &&
                                   contains(part.substr(0, space), ".");
        if (starts_change || parts.empty()) {
            parts.emplace_back(part);
        } else {
            parts.back() += ", " + std::string(part);
        }
        start = end + 2;
    }
    std::vector<KnobText> out;
    for (const std::string& part : parts) {
        const std::size_t space = part.find(' ');
        const std::size_t arrow = part.find(" -> ");
        if (space == std::string::npos || arrow == std::string::npos || space > arrow) continue;
        out.push_back({part.substr(0, space), std::string(trim(part.substr(space, arrow - space))),
                       std::string(trim(part.substr(arrow + 4)))});
    }
    return out;
}

// Fields of loom's JSON lines, read leniently (an events.jsonl from another loom version still
// diagnoses): a missing or null field is absent, a non-string one is given as its JSON text.
std::string json_text(const nlohmann::json& j, const char* key) {
    if (!j.contains(key) || j[key].is_null()) return {};
    return j[key].is_string() ? j[key].get<std::string>() : j[key].dump();
}

std::optional<std::int64_t> json_int(const nlohmann::json& j, const char* key) {
    if (!j.contains(key) || !j[key].is_number()) return std::nullopt;
    return j[key].get<std::int64_t>();
}

std::optional<std::uint64_t> json_bytes(const nlohmann::json& j, const char* key) {
    if (!j.contains(key) || !j[key].is_number() || j[key].get<double>() < 0) return std::nullopt;
    return j[key].get<std::uint64_t>();
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
            scan_segment(clean);
        } else {
            scan_segment(segment);
        }
        start = end + 1;
    }
}

EvidenceLine LogScanner::here(std::string_view s, std::string note) const {
    return {line_, evidence_text(s), std::move(note)};
}

void LogScanner::scan_segment(std::string_view raw) {
    const std::string_view s = trim(raw);
    if (s.empty()) return;
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

// ---- loom's events.jsonl (and metrics.jsonl lines)

bool LogScanner::scan_json(std::string_view s) {
    const nlohmann::json j = nlohmann::json::parse(s.begin(), s.end(), nullptr, false);
    if (j.is_discarded() || !j.is_object()) return false;
    if (j.contains("event") && j["event"].is_string()) {
        votes_[static_cast<int>(LogTool::kLoom)] += 3;
        scan_json_event(j, s);
        return true;
    }
    if (j.contains("step") && j.contains("loss") && j["step"].is_number_integer()) {
        votes_[static_cast<int>(LogTool::kLoom)] += 1;
        on_progress(j["step"].get<std::int64_t>(), s, false);
        return true;
    }
    return false;
}

void LogScanner::scan_json_event(const nlohmann::json& j, std::string_view s) {
    const std::string event = j["event"].get<std::string>();
    const std::optional<std::int64_t> step = json_int(j, "step");
    if (event == "oom") {
        Sighting o;
        o.where = here(s);
        o.phase = parse_phase(json_text(j, "phase")).value_or(Phase::kNone);
        o.explicit_phase = true;
        o.step = step;
        o.kind = kind_from_text(json_text(j, "kind"));
        OomFigures& f = o.figures;
        f.requested = json_bytes(j, "bytes_requested");
        f.allocated = json_bytes(j, "allocated");
        f.reserved = json_bytes(j, "reserved");
        f.free = json_bytes(j, "free");
        f.total = json_bytes(j, "total");
        read_figures(json_text(j, "message"), f);
        if (f.requested || f.allocated || f.reserved || f.free || f.total) f.line = line_;
        add_sighting(std::move(o));
    } else if (event == "change") {
        const std::string rule = json_text(j, "rule");
        const std::string reason = json_text(j, "reason");
        const std::string phase = json_text(j, "phase");
        if (j.contains("changes") && j["changes"].is_array() && !j["changes"].empty()) {
            for (const nlohmann::json& c : j["changes"]) {
                add_change({line_, json_text(c, "knob"), json_text(c, "from"), json_text(c, "to"),
                            rule, reason, phase, step});
            }
        } else if (j.contains("knob")) {
            add_change({line_, json_text(j, "knob"), json_text(j, "from"), json_text(j, "to"), rule,
                        reason, phase, step});
        }
        change_since_oom_ = true;
    } else if ((event == "stable" || event == "save") && step) {
        on_progress(*step, s, false);
    } else if (event == "does_not_fit" || event == "worker_state" || event == "host_memory") {
        std::string message = json_text(j, "message");
        if (message.empty()) message = json_text(j, "reason");
        set_outcome(event == "does_not_fit"   ? "does not fit"
                    : event == "worker_state" ? "worker state"
                                              : "host memory",
                    message, s);
        OomFigures f;
        f.free = json_bytes(j, "free");
        f.total = json_bytes(j, "total");
        f.allocated = json_bytes(j, "allocated");
        if (figures_.empty() && (f.free || f.total)) {
            figures_ = f;
            figures_.line = line_;
        }
    }
}

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

// ---- which tool wrote it

void LogScanner::vote_tool(std::string_view s) {
    static constexpr std::array<std::string_view, 14> kAiToolkit = {
        "# Running job:",
        "Running  1 process",
        "Running 1 job",
        "# OOM during training step",
        "times in a row, aborting training",
        "Generating baseline samples",
        "Error running job:",
        "BaseSDTrainProcess",
        "ai-toolkit",
        "ai_toolkit",
        "AI-Toolkit",
        "Job ID: \"",
        "completed jobs",
        "Generating Images"};
    static constexpr std::array<std::string_view, 8> kKohya = {
        "sd-scripts", "train_network.py", "sdxl_train",    "kohya",
        "学習開始",   "avr_loss",         "train_util.py", "prepare optimizer, data loader"};
    static constexpr std::array<std::string_view, 6> kPyTorch = {
        "Traceback (most recent call last)",
        "torch",
        "OutOfMemoryError",
        "CUDA out of memory",
        "diffusers",
        "accelerate"};
    static constexpr std::array<std::string_view, 5> kLoom = {
        "plan change: ", "] [guard] [", "] [train] [",
        "error: does not fit:", "error: worker state:"};
    auto count = [&](LogTool tool, const auto& needles, int weight) {
        for (std::string_view n : needles) {
            if (contains(s, n)) votes_[static_cast<int>(tool)] += weight;
        }
    };
    count(LogTool::kAiToolkit, kAiToolkit, 1);
    count(LogTool::kKohya, kKohya, 1);
    count(LogTool::kPyTorch, kPyTorch, 1);
    count(LogTool::kLoom, kLoom, 3);
}

// The tool with the most votes; a plain PyTorch script only when no trainer was recognised (the
// trainers print PyTorch's tracebacks too).
LogTool LogScanner::elected_tool() const {
    const auto vote = [&](LogTool t) { return votes_[static_cast<int>(t)]; };
    LogTool tool = LogTool::kUnknown;
    for (LogTool t : {LogTool::kLoom, LogTool::kAiToolkit, LogTool::kKohya}) {
        if (vote(t) > 0 && vote(t) > vote(tool)) tool = t;
    }
    if (tool == LogTool::kUnknown && vote(LogTool::kPyTorch) > 0) tool = LogTool::kPyTorch;
    return tool;
}

// ---- settings printed in the log

void LogScanner::read_settings(std::string_view s) {
    Settings& st = settings_;
    auto note_int = [&](std::optional<Noted<std::int64_t>>& into, std::optional<std::int64_t> v,
                        const char* what) {
        if (v && (!into || *v > into->value)) into = Noted<std::int64_t>{*v, here(s, what)};
    };
    auto note_bool = [&](std::optional<Noted<bool>>& into, std::optional<bool> v,
                         const char* what) {
        if (v) into = Noted<bool>{*v, here(s, what)};
    };
    if (auto v = value_after_key(s, "batch_size"))
        note_int(st.batch_size, leading_int(*v), "batch size");
    if (auto v = value_after_key(s, "train_batch_size")) {
        note_int(st.batch_size, leading_int(*v), "batch size");
    }
    // kohya "batch size per device / バッチサイズ: 4"; diffusers "... batch size per device = 1"
    if (const std::size_t pos = s.find("batch size per device"); pos != std::string_view::npos) {
        const std::size_t sep = s.find_first_of(":=", pos);
        if (sep != std::string_view::npos) {
            note_int(st.batch_size, leading_int(trim(s.substr(sep + 1))), "batch size");
        }
    }
    if (auto v = value_after_key(s, "gradient_checkpointing")) {
        note_bool(st.gradient_checkpointing, leading_bool(*v), "gradient checkpointing");
    } else if (contains(s, "--gradient_checkpointing")) {
        note_bool(st.gradient_checkpointing, true, "gradient checkpointing");
    }
    if (auto v = value_after_key(s, "num_frames"))
        note_int(st.num_frames, leading_int(*v), "frames");
    if (auto v = value_after_key(s, "low_vram"))
        note_bool(st.low_vram, leading_bool(*v), "low_vram");
    if (starts_with(s, "# Running job: ")) job_name_ = std::string(trim(s.substr(15)));
    read_resolution(s);
    if (s.size() <= kMaxVideoScan) read_video_arch(s);
}

void LogScanner::read_resolution(std::string_view s) {
    Settings& st = settings_;
    auto note = [&](std::string_view values, const EvidenceLine& where) {
        for (std::int64_t r : all_ints(values)) {
            // Small numbers in the list are not resolutions (a stray index, a repeat count).
            if (r >= 64 && (!st.max_resolution || r > st.max_resolution->value)) {
                st.max_resolution = Noted<std::int64_t>{r, where};
            }
        }
    };
    if (in_resolution_list_) {
        const std::size_t close = s.find(']');
        note(s.substr(0, close), resolution_start_);
        if (close != std::string_view::npos || contains(s, ":")) in_resolution_list_ = false;
        return;
    }
    const std::optional<std::string_view> v = value_after_key(s, "resolution");
    if (!v) return;
    const std::size_t close = v->find(']');
    resolution_start_ = here(s, "resolution");
    note(v->substr(0, close), resolution_start_);
    in_resolution_list_ = starts_with(*v, "[") && close == std::string_view::npos;
}

void LogScanner::read_video_arch(std::string_view s) {
    if (settings_.video_arch) return;
    static constexpr std::array<std::string_view, 15> kVideo = {
        "wan21",       "wan22",         "wan2.1",       "wan2.2",        "wan 2.",
        "loading wan", "hunyuan_video", "hunyuanvideo", "hunyuan video", "ltx-video",
        "ltx_video",   "ltxv",          "ltx2",         "ltx-2",         "ltx 2."};
    const std::string lower = lower_ascii(s);
    for (std::string_view token : kVideo) {
        if (contains(lower, token)) {
            settings_.video_arch = here(s, "video model");
            return;
        }
    }
}

// ---- loom's own lines: console, loom.log

bool LogScanner::scan_loom_line(std::string_view s) {
    if (scan_loom_outcome(s) || scan_loom_oom(s) || scan_loom_change(s)) {
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

// "out of memory in train_step at step 3 (device_oom): <message>"
bool LogScanner::scan_loom_oom(std::string_view s) {
    const std::size_t pos = s.find("out of memory in ");
    if (pos == std::string_view::npos) return false;
    const std::string_view rest = s.substr(pos + 17);
    const std::optional<Phase> phase = parse_phase(rest.substr(0, rest.find_first_of(" :")));
    if (!phase) return false;
    Sighting o;
    o.where = here(s);
    o.phase = *phase;
    o.explicit_phase = true;
    if (const std::size_t at = rest.find(" at step "); at != std::string_view::npos) {
        o.step = leading_int(rest.substr(at + 9));
    }
    if (const std::size_t open = rest.find(" ("); open != std::string_view::npos) {
        o.kind = kind_from_text(rest.substr(open + 2));
    }
    if (read_figures(rest, o.figures)) o.figures.line = line_;
    add_sighting(std::move(o));
    return true;
}

// "plan change: train.batch_size 2 -> 1, train.gradient_accumulation 1 -> 2 (rule: <id>) — why"
bool LogScanner::scan_loom_change(std::string_view s) {
    const std::size_t pos = s.find("plan change: ");
    if (pos == std::string_view::npos) return false;
    std::string_view list = s.substr(pos + 13);
    std::string rule;
    std::string reason;
    if (const std::size_t r = list.find(" (rule: "); r != std::string_view::npos) {
        const std::string_view tail = list.substr(r + 8);
        const std::size_t close = tail.find(')');
        rule = std::string(tail.substr(0, close));
        if (close != std::string_view::npos) {
            std::string_view why = trim(tail.substr(close + 1));
            if (starts_with(why, "\xE2\x80\x94")) why = trim(why.substr(3));  // an em dash
            if (starts_with(why, "-")) why = trim(why.substr(1));
            reason = std::string(why);
        }
        list = list.substr(0, r);
    }
    for (KnobText& k : split_changes(list)) {
        add_change({line_, std::move(k.knob), std::move(k.from), std::move(k.to), rule, reason, "",
                    std::nullopt});
    }
    change_since_oom_ = true;  // also "no change, retry": loom acted on the OOM
    return true;
}

// "error: does not fit: ..." / "error: worker state: ..." (the console's last line).
bool LogScanner::scan_loom_outcome(std::string_view s) {
    for (std::string_view outcome :
         {std::string_view("does not fit: "), std::string_view("worker state: ")}) {
        const std::size_t pos = s.find(outcome);
        if (pos == std::string_view::npos) continue;
        const std::string_view before = s.substr(0, pos);
        const bool error = (before.size() >= 7 && before.substr(before.size() - 7) == "error: ") ||
                           contains(before, "[error]");
        if (!error) continue;
        set_outcome(std::string(outcome.substr(0, outcome.size() - 2)),
                    std::string(s.substr(pos + outcome.size())), s);
        // With oom.enabled false the message carries the OOM itself: "out of memory in ...".
        scan_loom_oom(s);
        return true;
    }
    return false;
}

void LogScanner::set_outcome(const std::string& what, const std::string& message,
                             std::string_view s) {
    loom_outcome_ = evidence_text(message.empty() ? what : what + ": " + message);
    outcome_line_ = here(s, "loom stopped: " + what);
    // "shows 0 bytes free of 96.00 MiB before loom allocated anything"
    if (figures_.empty() && read_figures(message, figures_)) figures_.line = line_;
}

void LogScanner::add_change(LoomChange c) {
    if (c.phase.empty() && !sightings_.empty()) {
        c.phase = to_string(sightings_.back().phase);
        if (!c.step) c.step = sightings_.back().step;
    }
    changes_.push_back(std::move(c));
}

// ---- progress bars and phase markers of the Python trainers

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
    record_success(n, s);
}

void LogScanner::record_success(std::int64_t step, std::string_view s) {
    ++successes_;
    last_success_ =
        here(s, "last successful training step before the OOM (step " + std::to_string(step) + ")");
    success_since_oom_ = true;
    if (!sightings_.empty() && !change_since_oom_) {
        ++successes_after_oom_;
        if (!first_success_after_oom_) {
            first_success_after_oom_ =
                here(s, "training went on after the OOM (step " + std::to_string(step) + ")");
        }
    }
}

void LogScanner::set_phase(Phase phase, std::string_view s) {
    phase_ = phase;
    phase_marker_ = here(s);
    phase_marker_phase_ = phase;
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

// ---- OOM lines of the Python trainers

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

void LogScanner::add_sighting(Sighting o) {
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
    return facts;
}

}  // namespace loom::guard::detail
