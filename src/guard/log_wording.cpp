// The guard's console and loom.log lines (loom/guard/log_wording.h): each written by one
// `to_line` and read back by one `parse_*`, so the writer and `loom doctor` cannot drift apart.

#include "loom/guard/log_wording.h"

#include <array>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "loom/core/byte_size.h"
#include "loom/guard/ladder_policy.h"

namespace loom::guard {

namespace {

constexpr std::string_view kAtStep = " at step ";
constexpr std::string_view kEmDash = "\xE2\x80\x94";
constexpr std::string_view kNoChange = "no change, retry";
constexpr std::string_view kRuleOpen = " (rule: ";
constexpr std::string_view kOomDisabledTail =
    ") and oom.enabled is false, so loom did not try smaller settings; the plan was: ";
constexpr std::string_view kHostWords = "host RAM ran out in ";
constexpr std::string_view kHostTail =
    "); device settings cannot help: close other programs, lower datasets[].cache_latents "
    "(in-RAM caches) or use a machine with more RAM";
constexpr std::string_view kDirtyShows = " shows ";
constexpr std::string_view kDirtyFreeOf = " free of ";
constexpr std::string_view kDirtyTail =
    " before loom allocated anything (\"0 bytes is free\"): another process or a broken context "
    "holds the memory. No setting can fix that \xE2\x80\x94 start on a fresh worker (or free the "
    "GPU), then run the same job again.";
constexpr std::string_view kStableWords = "plan recorded as stable after ";
constexpr std::string_view kScaleUpWords = "scale-up: ";
constexpr std::string_view kUndoing = " (undoing ";
constexpr std::string_view kProbePeak = "probe peak ";
constexpr std::string_view kPinnedWords = " does not fit with ";
constexpr std::string_view kPinnedTail = "); pinned for this run";
constexpr std::string_view kProbeOom = "the probe ran out of memory";
constexpr std::string_view kRecoveredWords = " out-of-memory errors recovered";

bool starts_with(std::string_view s, std::string_view prefix) {
    return s.substr(0, prefix.size()) == prefix;
}

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
        s.remove_suffix(1);
    }
    return s;
}

// The whole number at the start of `s` (at most 18 digits); `s` moves past it.
std::optional<std::int64_t> take_int(std::string_view& s) {
    std::size_t n = 0;
    while (n < s.size() && n < 18 && is_digit(s[n])) ++n;
    if (n == 0) return std::nullopt;
    const std::int64_t v = std::strtoll(std::string(s.substr(0, n)).c_str(), nullptr, 10);
    s.remove_prefix(n);
    return v;
}

// "16.00 MiB", "0 bytes" (format_bytes_human) back to bytes.
std::optional<std::uint64_t> size_of(std::string_view s) {
    s = trim(s);
    const std::size_t space = s.find(' ');
    if (space == std::string_view::npos || space == 0) return std::nullopt;
    static constexpr std::array<std::pair<std::string_view, double>, 5> kUnits{{
        {"bytes", 1.0},
        {"KiB", 1024.0},
        {"MiB", 1048576.0},
        {"GiB", 1073741824.0},
        {"TiB", 1099511627776.0},
    }};
    const std::string number(s.substr(0, space));
    char* end = nullptr;
    const double value = std::strtod(number.c_str(), &end);
    if (end != number.c_str() + number.size() || value < 0) return std::nullopt;
    for (const auto& [unit, factor] : kUnits) {
        if (s.substr(space + 1) == unit) {
            return static_cast<std::uint64_t>(std::llround(value * factor));
        }
    }
    return std::nullopt;
}

std::string step_text(const std::optional<std::int64_t>& step) {
    return step ? std::string(kAtStep) + std::to_string(*step) : std::string();
}

// "<phase>[ at step N]" at the start of `s`; `s` moves past it.
std::optional<std::pair<Phase, std::optional<std::int64_t>>> take_phase_step(std::string_view& s) {
    std::size_t end = 0;
    while (end < s.size() && s[end] != ' ' && s[end] != ':' && s[end] != '(') ++end;
    const std::optional<Phase> phase = parse_phase(s.substr(0, end));
    if (!phase) return std::nullopt;
    s.remove_prefix(end);
    std::optional<std::int64_t> step;
    if (starts_with(s, kAtStep)) {
        std::string_view rest = s.substr(kAtStep.size());
        if ((step = take_int(rest))) s = rest;
    }
    return std::make_pair(*phase, step);
}

// "device" (and the older "device_oom"), "library", "host".
std::optional<OomKind> kind_from_name(std::string_view name) {
    if (ends_with(name, "_oom")) name.remove_suffix(4);
    for (OomKind k : {OomKind::kDevice, OomKind::kLibrary, OomKind::kHost}) {
        if (name == kind_name(k)) return k;
    }
    return std::nullopt;
}

// "a.b false -> true, c.d [512, 768] -> [512]": split on ", " only where a new "knob x -> y"
// starts, since values may hold commas themselves.
std::vector<KnobChange> split_changes(std::string_view list) {
    std::vector<std::string> parts;
    for (std::size_t start = 0; start <= list.size();) {
        std::size_t end = list.find(", ", start);
        if (end == std::string_view::npos) end = list.size();
        const std::string_view part = list.substr(start, end - start);
        const std::size_t space = part.find(' ');
        const bool starts_change = part.find(" -> ") != std::string_view::npos &&
                                   space != std::string_view::npos &&
                                   part.substr(0, space).find('.') != std::string_view::npos;
        if (starts_change || parts.empty()) {
            parts.emplace_back(part);
        } else {
            parts.back() += ", " + std::string(part);
        }
        start = end + 2;
    }
    std::vector<KnobChange> out;
    for (const std::string& part : parts) {
        const std::size_t space = part.find(' ');
        const std::size_t arrow = part.find(" -> ");
        if (space == std::string::npos || arrow == std::string::npos || space > arrow) continue;
        out.push_back({part.substr(0, space),
                       std::string(trim(std::string_view(part).substr(space, arrow - space))),
                       std::string(trim(std::string_view(part).substr(arrow + 4)))});
    }
    return out;
}

}  // namespace

std::string knob_changes_text(const std::vector<KnobChange>& changes) {
    std::string s;
    for (const KnobChange& c : changes) {
        if (!s.empty()) s += ", ";
        s += c.knob + " " + c.from + " -> " + c.to;
    }
    return s;
}

// ---- out of memory in <phase>

std::string to_line(const OomLine& line) {
    return std::string(kOomWords) + to_string(line.phase) + step_text(line.step) + " (" +
           kind_name(line.kind) + "): " + line.message;
}

std::optional<OomLine> parse_oom_line(std::string_view text) {
    const std::size_t pos = text.find(kOomWords);
    if (pos == std::string_view::npos) return std::nullopt;
    std::string_view rest = text.substr(pos + kOomWords.size());
    const auto phase_step = take_phase_step(rest);
    if (!phase_step) return std::nullopt;
    OomLine line;
    line.phase = phase_step->first;
    line.step = phase_step->second;
    if (starts_with(rest, " (")) {
        const std::size_t close = rest.find("): ");
        if (close != std::string_view::npos) {
            if (const std::optional<OomKind> kind = kind_from_name(rest.substr(2, close - 2))) {
                line.kind = *kind;
                line.message = std::string(rest.substr(close + 3));
                return line;
            }
        }
    }
    // Without a kind (an older wording): the rest is the message.
    if (starts_with(rest, ":")) rest.remove_prefix(1);
    line.message = std::string(trim(rest));
    return line;
}

// ---- plan change

std::string to_line(const PlanChangeLine& line) {
    const std::string changes =
        line.changes.empty() ? std::string(kNoChange) : knob_changes_text(line.changes);
    return std::string(kPlanChangeWords) + changes + std::string(kRuleOpen) + line.rule + ") " +
           std::string(kEmDash) + " " + line.reason;
}

std::optional<PlanChangeLine> parse_plan_change_line(std::string_view text) {
    const std::size_t pos = text.find(kPlanChangeWords);
    if (pos == std::string_view::npos) return std::nullopt;
    std::string_view list = text.substr(pos + kPlanChangeWords.size());
    PlanChangeLine line;
    if (const std::size_t r = list.find(kRuleOpen); r != std::string_view::npos) {
        const std::string_view tail = list.substr(r + kRuleOpen.size());
        const std::size_t close = tail.find(')');
        line.rule = std::string(tail.substr(0, close));
        if (close != std::string_view::npos) {
            std::string_view why = trim(tail.substr(close + 1));
            if (starts_with(why, kEmDash)) why = trim(why.substr(kEmDash.size()));
            if (starts_with(why, "-")) why = trim(why.substr(1));
            line.reason = std::string(why);
        }
        list = list.substr(0, r);
    }
    if (trim(list) != kNoChange) line.changes = split_changes(list);
    return line;
}

// ---- out of memory with oom.enabled false

std::string to_line(const OomDisabledLine& line) {
    return std::string(kOomWords) + to_string(line.phase) + step_text(line.step) + " (" +
           line.message + std::string(kOomDisabledTail) + line.plan;
}

std::optional<OomDisabledLine> parse_oom_disabled_line(std::string_view text) {
    const std::size_t pos = text.find(kOomWords);
    const std::size_t tail = text.rfind(kOomDisabledTail);
    if (pos == std::string_view::npos || tail == std::string_view::npos || tail < pos) {
        return std::nullopt;
    }
    std::string_view rest = text.substr(pos + kOomWords.size(), tail - pos - kOomWords.size());
    const auto phase_step = take_phase_step(rest);
    if (!phase_step || !starts_with(rest, " (")) return std::nullopt;
    OomDisabledLine line;
    line.phase = phase_step->first;
    line.step = phase_step->second;
    line.message = std::string(rest.substr(2));
    line.plan = std::string(text.substr(tail + kOomDisabledTail.size()));
    return line;
}

// ---- host RAM

std::string to_line(const HostMemoryLine& line) {
    return std::string(kHostWords) + to_string(line.phase) + step_text(line.step) + " (" +
           line.message + std::string(kHostTail);
}

std::optional<HostMemoryLine> parse_host_memory_line(std::string_view text) {
    const std::size_t pos = text.find(kHostWords);
    const std::size_t tail = text.rfind(kHostTail);
    if (pos == std::string_view::npos || tail == std::string_view::npos || tail < pos) {
        return std::nullopt;
    }
    std::string_view rest = text.substr(pos + kHostWords.size(), tail - pos - kHostWords.size());
    const auto phase_step = take_phase_step(rest);
    if (!phase_step || !starts_with(rest, " (")) return std::nullopt;
    return HostMemoryLine{phase_step->first, phase_step->second, std::string(rest.substr(2))};
}

// ---- a dirty device

std::string to_line(const DirtyDeviceLine& line) {
    return line.device + std::string(kDirtyShows) + format_bytes_human(line.free) +
           std::string(kDirtyFreeOf) + format_bytes_human(line.total) + std::string(kDirtyTail);
}

std::optional<DirtyDeviceLine> parse_dirty_device_line(std::string_view text) {
    if (const std::optional<OutcomeLine> outcome = parse_outcome_line(text)) {
        return parse_dirty_device_line(outcome->message);
    }
    const std::size_t tail = text.rfind(kDirtyTail);
    if (tail == std::string_view::npos) return std::nullopt;
    const std::string_view head = text.substr(0, tail);
    const std::size_t free_of = head.rfind(kDirtyFreeOf);
    if (free_of == std::string_view::npos) return std::nullopt;
    const std::size_t shows = head.rfind(kDirtyShows, free_of);
    if (shows == std::string_view::npos) return std::nullopt;
    const std::string_view free_text =
        head.substr(shows + kDirtyShows.size(), free_of - shows - kDirtyShows.size());
    const std::optional<std::uint64_t> free = size_of(free_text);
    const std::optional<std::uint64_t> total = size_of(head.substr(free_of + kDirtyFreeOf.size()));
    if (!free || !total) return std::nullopt;
    return DirtyDeviceLine{std::string(trim(head.substr(0, shows))), *free, *total};
}

// ---- error: does not fit / worker state

std::string to_line(const OutcomeLine& line) {
    return std::string(kErrorPrefix) +
           std::string(line.kind == OutcomeLine::Kind::kDoesNotFit ? kDoesNotFitWords
                                                                   : kWorkerStateWords) +
           line.message;
}

std::optional<OutcomeLine> parse_outcome_line(std::string_view text) {
    for (const auto& [words, kind] :
         {std::make_pair(kDoesNotFitWords, OutcomeLine::Kind::kDoesNotFit),
          std::make_pair(kWorkerStateWords, OutcomeLine::Kind::kWorkerState)}) {
        const std::size_t pos = text.find(words);
        if (pos == std::string_view::npos) continue;
        const std::string_view before = text.substr(0, pos);
        if (!ends_with(before, kErrorPrefix) && before.find("[error]") == std::string_view::npos) {
            continue;
        }
        return OutcomeLine{kind, std::string(text.substr(pos + words.size()))};
    }
    return std::nullopt;
}

// ---- plan recorded as stable

std::string to_line(const StableLine& line) {
    return std::string(kStableWords) + std::to_string(line.steps) + " steps: " + line.plan;
}

std::optional<StableLine> parse_stable_line(std::string_view text) {
    const std::size_t pos = text.find(kStableWords);
    if (pos == std::string_view::npos) return std::nullopt;
    std::string_view rest = text.substr(pos + kStableWords.size());
    const std::optional<std::int64_t> steps = take_int(rest);
    if (!steps || !starts_with(rest, " steps: ")) return std::nullopt;
    return StableLine{*steps, std::string(rest.substr(8))};
}

// ---- scale-up

std::string to_line(const ScaleUpKeptLine& line) {
    return std::string(kScaleUpWords) + knob_changes_text(line.changes) + std::string(kUndoing) +
           line.rule + "; " + std::string(kProbePeak) + format_bytes_human(line.peak) + " of " +
           format_bytes_human(line.total) + ")";
}

std::optional<ScaleUpKeptLine> parse_scale_up_kept_line(std::string_view text) {
    const std::size_t pos = text.find(kScaleUpWords);
    if (pos == std::string_view::npos) return std::nullopt;
    std::string_view rest = trim(text.substr(pos + kScaleUpWords.size()));
    const std::size_t undoing = rest.rfind(kUndoing);
    if (undoing == std::string_view::npos || !ends_with(rest, ")")) return std::nullopt;
    const std::string_view inner =
        rest.substr(undoing + kUndoing.size(), rest.size() - 1 - undoing - kUndoing.size());
    const std::size_t peak = inner.rfind("; " + std::string(kProbePeak));
    if (peak == std::string_view::npos) return std::nullopt;
    const std::string_view figures = inner.substr(peak + 2 + kProbePeak.size());
    const std::size_t of = figures.find(" of ");
    if (of == std::string_view::npos) return std::nullopt;
    const std::optional<std::uint64_t> used = size_of(figures.substr(0, of));
    const std::optional<std::uint64_t> total = size_of(figures.substr(of + 4));
    if (!used || !total) return std::nullopt;
    return ScaleUpKeptLine{split_changes(rest.substr(0, undoing)),
                           std::string(inner.substr(0, peak)), *used, *total};
}

std::string to_line(const ScaleUpPinnedLine& line) {
    return std::string(kScaleUpWords) + knob_changes_text(line.changes) +
           std::string(kPinnedWords) + std::to_string(line.headroom_percent) + "% headroom (" +
           (line.peak ? std::string(kProbePeak) + format_bytes_human(*line.peak)
                      : std::string(kProbeOom)) +
           std::string(kPinnedTail);
}

std::optional<ScaleUpPinnedLine> parse_scale_up_pinned_line(std::string_view text) {
    const std::size_t pos = text.find(kScaleUpWords);
    if (pos == std::string_view::npos) return std::nullopt;
    const std::string_view rest = trim(text.substr(pos + kScaleUpWords.size()));
    const std::size_t words = rest.rfind(kPinnedWords);
    if (words == std::string_view::npos || !ends_with(rest, kPinnedTail)) return std::nullopt;
    std::string_view after = rest.substr(words + kPinnedWords.size());
    after.remove_suffix(kPinnedTail.size());
    const std::optional<std::int64_t> percent = take_int(after);
    if (!percent || !starts_with(after, "% headroom (")) return std::nullopt;
    after.remove_prefix(12);
    ScaleUpPinnedLine line;
    line.changes = split_changes(rest.substr(0, words));
    line.headroom_percent = static_cast<int>(*percent);
    if (starts_with(after, kProbePeak)) {
        line.peak = size_of(after.substr(kProbePeak.size()));
        if (!line.peak) return std::nullopt;
    } else if (after != kProbeOom) {
        return std::nullopt;
    }
    return line;
}

// ---- N out-of-memory errors recovered

std::string to_line(const RecoveredLine& line) {
    return std::to_string(line.ooms) + std::string(kRecoveredWords) + " with " +
           std::to_string(line.changes) + " plan changes, " + std::to_string(line.steps_lost) +
           " steps lost; final plan: " + line.final_plan;
}

std::string recovered_counts_text(const RecoveredLine& line) {
    return std::to_string(line.ooms) + std::string(kRecoveredWords) + ", " +
           std::to_string(line.changes) + " plan changes, " + std::to_string(line.steps_lost) +
           " steps lost";
}

std::optional<RecoveredLine> parse_recovered_line(std::string_view text) {
    const std::size_t pos = text.find(kRecoveredWords);
    if (pos == std::string_view::npos) return std::nullopt;
    std::size_t start = pos;
    while (start > 0 && is_digit(text[start - 1])) --start;
    std::string_view number = text.substr(start, pos - start);
    const std::optional<std::int64_t> ooms = take_int(number);
    if (!ooms || !number.empty()) return std::nullopt;
    std::string_view rest = text.substr(pos + kRecoveredWords.size());
    const bool with_plan = starts_with(rest, " with ");
    if (!with_plan && !starts_with(rest, ", ")) return std::nullopt;
    rest.remove_prefix(with_plan ? 6 : 2);
    const std::optional<std::int64_t> changes = take_int(rest);
    if (!changes || !starts_with(rest, " plan changes, ")) return std::nullopt;
    rest.remove_prefix(15);
    const std::optional<std::int64_t> lost = take_int(rest);
    if (!lost || !starts_with(rest, " steps lost")) return std::nullopt;
    rest.remove_prefix(11);
    RecoveredLine line{static_cast<int>(*ooms), static_cast<int>(*changes), *lost, {}};
    if (with_plan) {
        if (!starts_with(rest, "; final plan: ")) return std::nullopt;
        line.final_plan = std::string(rest.substr(14));
    }
    return line;
}

}  // namespace loom::guard
