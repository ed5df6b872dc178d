#include "loom/guard/guard.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <sstream>

#include "guard_log.h"
#include "loom/core/byte_size.h"
#include "loom/core/error.h"
#include "loom/core/logging.h"
#include "loom/core/version.h"
#include "loom/device/faults.h"
#include "loom/device/oom_classify.h"
#include "loom/guard/log_wording.h"
#include "loom/io/atomic_file.h"

namespace loom::guard {

namespace {

// The exception's message without c10's backtrace, first line only.
std::string message_of(const std::exception_ptr& failure) {
    std::string text;
    try {
        std::rethrow_exception(failure);
    } catch (const c10::Error& e) {
        text = e.what_without_backtrace();
    } catch (const std::exception& e) {
        text = e.what();
    } catch (...) {
        text = "unknown exception";
    }
    const std::size_t eol = text.find('\n');
    return eol == std::string::npos ? text : text.substr(0, eol);
}

}  // namespace

std::optional<std::uint64_t> requested_bytes(const std::string& message) {
    static const std::string kMarker = "Tried to allocate ";
    const std::size_t at = message.find(kMarker);
    if (at == std::string::npos) return std::nullopt;
    std::size_t end = at + kMarker.size();
    // "16.00 MiB" then ';', '.', ' (' or the end: the number, one space, the unit.
    while (end < message.size() &&
           (std::isdigit(static_cast<unsigned char>(message[end])) || message[end] == '.')) {
        ++end;
    }
    while (end < message.size() && message[end] == ' ') ++end;
    while (end < message.size() && std::isalpha(static_cast<unsigned char>(message[end]))) ++end;
    try {
        return parse_byte_size(message.substr(at + kMarker.size(), end - at - kMarker.size()));
    } catch (const Error&) {
        return std::nullopt;
    }
}

Guard::Guard(Device& device, Plan plan, GuardOptions options, EventLog& events)
    : device_(device),
      plan_(std::move(plan)),
      options_(std::move(options)),
      events_(events),
      job_plan_(plan_) {
    if (options_.agreement != nullptr) options_.scale_up = false;
}

void Guard::agree_so_far() {
    if (options_.agreement != nullptr && options_.agreement->any(false)) throw PeersFailed();
}

void Guard::check_device_clean() {
    if (device_.spec().kind == DeviceKind::kCpu) return;  // RAM, not an accelerator
    const MemoryStats m = device_.stats();
    if (!device_looks_dirty(m)) return;
    events_.record("worker_state", {{"phase", "load"},
                                    {"rule", "worker_state.dirty_at_start"},
                                    {"free", m.free},
                                    {"total", m.total},
                                    {"allocated", m.allocated}});
    throw WorkerStateError(to_line(DirtyDeviceLine{device_.description(), m.free, m.total}));
}

OomEvent Guard::make_event(Phase phase, Work work, std::optional<std::int64_t> step, OomKind kind,
                           const std::exception_ptr& failure) const {
    OomEvent e;
    e.phase = phase;
    e.work = work;
    e.step = step;
    e.kind = kind;
    e.message = message_of(failure);
    e.bytes_requested = requested_bytes(e.message);
    e.memory = device_.stats();
    e.bucket = bucket_;
    e.bucket_frames = bucket_frames_;
    e.buckets = target_ != nullptr ? target_->bucket_facts() : BucketFacts{};
    e.after_sample = after_sample_;
    return e;
}

void Guard::run(Phase phase, std::optional<std::int64_t> step, const std::function<void()>& attempt,
                std::optional<Work> work_override) {
    const Work work = work_override.value_or(work_of(phase));
    for (;;) {
        std::exception_ptr failure;
        bool peers_failed = false;  // the group's outcome, known from agree_so_far
        bucket_.reset();
        bucket_frames_ = 1;
        device_.reset_peak();  // the attempt's own peak: what was in use when it failed
        const std::uint64_t injected_before = fault_injector().failures_injected();
        const auto started = std::chrono::steady_clock::now();
        {
            PhaseScope scope(phase, step);
            try {
                attempt();
            } catch (const PeersFailed&) {
                peers_failed = true;
            } catch (...) {
                failure = std::current_exception();
            }
        }
        run_peak_ = std::max(run_peak_, device_.stats().peak_allocated);
        // Several ranks: the attempt failed if it failed anywhere. A rank whose error is not an
        // out-of-memory one still answers before it rethrows, so the others find it gone (a
        // DistError at their next collective) rather than wait for it.
        const bool failed_here = failure != nullptr;
        const bool failed =
            peers_failed ||
            (options_.agreement != nullptr ? options_.agreement->any(failed_here) : failed_here);
        if (!failed) {
            if (work == Work::kSave) history_.save_retries = 0;
            if (phase == Phase::kTrainStep) {
                step_seconds_on_plan_ +=
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
                        .count();
            }
            return;
        }
        // Outside the catch block: the attempt's stack, and every tensor it held, is gone.
        std::optional<OomEvent> own;  // nullopt: another rank failed, this one did not
        if (failed_here) {
            const OomKind kind = classify(failure);
            if (kind == OomKind::kNotOom) std::rethrow_exception(failure);
            own = make_event(phase, work, step, kind, failure);
        }
        failure = nullptr;
        if (target_ != nullptr) target_->release_after_oom();
        device_.empty_cache();
        ++ooms_;
        history_.failed.emplace_back(work, plan_);  // before deciding: the plan that failed
        OomEvent event = own.value_or(OomEvent{});
        std::optional<Decision> together;
        if (options_.agreement != nullptr) {
            together = decide_together(own, event);
            if (!own) {
                guard_log().warn(
                    "another rank ran out of memory in {}; this rank drops its attempt too",
                    to_string(phase));
            }
        }
        const OomKind kind = event.kind;
        events_.oom(event, describe(plan_));
        if (options_.store != nullptr) {
            OomFacts facts;
            facts.phase = to_string(phase);
            facts.step = step;
            facts.kind = kind_name(kind);
            facts.bytes_requested = event.bytes_requested;
            facts.in_use = event.memory.peak_allocated;
            facts.total = event.memory.total;
            facts.plan = plan_;
            facts.injected = fault_injector().failures_injected() != injected_before;
            facts.message = event.message;
            options_.store->oom(facts);
        }
        guard_log().warn("{}", to_line(OomLine{phase, step, kind, event.message}));
        if (!options_.enabled) {
            throw DoesNotFitError(
                to_line(OomDisabledLine{phase, step, event.message, describe(plan_)}));
        }
        Decision decision = together ? *together : decide(plan_, event, history_, options_.context);
        const bool measured = !together && options_.measure && target_ != nullptr &&
                              work == Work::kTrain && kind != OomKind::kHost &&
                              decision.action == Decision::Action::kRetry &&
                              measured_rung(decision.rule);
        const bool reversible = reversible_change(plan_, decision.plan);
        if (measured && reversible) decision = measured_choice(decision, event);
        events_.decision(decision, event);
        switch (decision.action) {
            case Decision::Action::kRetry:
                if (work == Work::kSave) ++history_.save_retries;
                apply(decision);
                if (measured && !reversible) measure_after(decision, event);
                continue;
            case Decision::Action::kDoesNotFit: throw DoesNotFitError(decision.reason);
            case Decision::Action::kWorkerState: throw WorkerStateError(decision.reason);
            case Decision::Action::kHostMemory:
                throw Error(to_line(HostMemoryLine{phase, step, event.message}));
        }
    }
}

Decision Guard::decide_together(const std::optional<OomEvent>& own, OomEvent& decisive) {
    RankAgreement& group = *options_.agreement;
    const std::vector<std::string> reports = group.gather(own ? event_to_text(*own) : "");
    std::string text;
    if (group.leader()) {
        const auto first = std::find_if(reports.begin(), reports.end(),
                                        [](const std::string& r) { return !r.empty(); });
        if (first == reports.end()) throw Error("the ranks agreed on an OOM that none reported");
        const OomEvent event = event_from_text(*first);
        // The decision on the plan every rank runs, with the history every rank shares (each
        // rank records the same failures).
        nlohmann::json j;
        j["event"] = *first;
        j["decision"] = decision_to_text(decide(plan_, event, history_, options_.context));
        j["rank"] = first - reports.begin();
        text = j.dump();
    }
    const nlohmann::json j = nlohmann::json::parse(group.from_leader(text));
    decisive = event_from_text(j.at("event").get<std::string>());
    guard_log().info("rank {}'s out-of-memory error decides for every rank",
                     j.at("rank").get<int>());
    return decision_from_text(j.at("decision").get<std::string>(), plan_);
}

void Guard::apply(const Decision& d) {
    if (d.plan != plan_) {
        // A change the new plan walks back (a measured choice can) is no longer taken.
        taken_.erase(std::remove_if(taken_.begin(), taken_.end(),
                                    [&](const Taken& t) {
                                        return undo_change(d.plan, t.before, t.after) == d.plan;
                                    }),
                     taken_.end());
        taken_.push_back({plan_, d.plan, d.rule, d.rule == kMeasuredRule});
        if (target_ != nullptr) target_->apply_plan(plan_, d.plan);
        plan_ = d.plan;
        if (!options_.plan_file.empty()) save_plan(options_.plan_file, plan_);
        ++changes_;
        plan_changed();
    }
    guard_log().warn("{}", to_line(PlanChangeLine{d.changes, d.rule, d.reason}));
}

bool Guard::maybe_scale_up(std::int64_t step, const std::function<void(const Plan&)>& probe) {
    if (!options_.scale_up || steps_on_plan_ < options_.stable_after || target_ == nullptr) {
        return false;
    }
    // low_vram only goes up within a run (quantized weights cannot become float32 again without
    // a reload), so scale-up passes over it — except level 3's streaming, which it brings back
    // block by block and at last to level 2.
    auto change = std::find_if(taken_.rbegin(), taken_.rend(), [](const Taken& t) {
        return !t.pinned && (t.before.low_vram == t.after.low_vram ||
                             (t.before.low_vram == 2 && t.after.low_vram == 3));
    });
    if (change == taken_.rend()) return false;
    bool whole = true;
    const Plan candidate = scale_up_candidate(*change, whole);
    const std::vector<KnobChange> knobs = diff(plan_, candidate);
    const std::string knob_text = knob_changes_text(knobs);
    target_->apply_plan(plan_, candidate);
    device_.reset_peak();
    std::exception_ptr failure;
    {
        PhaseScope scope(Phase::kProbe, step);
        try {
            probe(candidate);
        } catch (...) {
            failure = std::current_exception();
        }
    }
    const MemoryStats m = device_.stats();
    const bool oom = failure && classify(failure) != OomKind::kNotOom;
    if (failure && !oom) std::rethrow_exception(failure);
    const auto limit =
        static_cast<std::uint64_t>(double(m.total) * (1.0 - options_.scale_up_headroom));
    const bool fits = !oom && (m.total == 0 || m.peak_allocated <= limit);
    failure = nullptr;
    events_.record("scale_up", {{"step", step},
                                {"undo", change->rule},
                                {"changes", knob_text},
                                {"result", fits ? "kept" : "pinned"},
                                {"probe", oom ? "out of memory" : "fits"},
                                {"peak", m.peak_allocated},
                                {"limit", limit},
                                {"plan", describe(fits ? candidate : plan_)}});
    if (!fits) {
        target_->release_after_oom();
        device_.empty_cache();
        target_->apply_plan(candidate, plan_);
        change->pinned = true;
        guard_log().warn(
            "{}", to_line(ScaleUpPinnedLine{knobs, int(options_.scale_up_headroom * 100),
                                            oom ? std::nullopt : std::optional(m.peak_allocated)}));
        return false;
    }
    const std::string rule = change->rule;
    plan_ = candidate;
    if (whole) taken_.erase(std::next(change).base());
    if (!options_.plan_file.empty()) save_plan(options_.plan_file, plan_);
    plan_changed();
    guard_log().warn("{}", to_line(ScaleUpKeptLine{knobs, rule, m.peak_allocated, m.total}));
    return true;
}

Plan Guard::scale_up_candidate(const Taken& change, bool& whole) const {
    whole = true;
    const Plan undone = undo_change(plan_, change.before, change.after);
    const int blocks = static_cast<int>(options_.context.block_bytes.size());
    const int before = change.before.streaming(blocks);
    const int now = plan_.streaming(blocks);
    if (blocks == 0 || change.after.streaming(blocks) <= before || now - 1 <= before) {
        return undone;
    }
    whole = false;
    Plan p = plan_;
    p.streamed_blocks = now - 1;
    return p;
}

void Guard::set_starting_streamed_blocks(int count) {
    if (changes_ != 0 || plan_.low_vram < 3) {
        throw Error(
            "the starting plan's streamed blocks are set before any plan change, at level 3");
    }
    plan_.streamed_blocks = count;
    job_plan_.streamed_blocks = count;
    if (!options_.plan_file.empty()) save_plan(options_.plan_file, plan_);
}

void Guard::set_stream_facts(std::vector<std::uint64_t> block_bytes, std::uint64_t overhead) {
    options_.context.block_bytes = std::move(block_bytes);
    options_.context.stream_overhead = overhead;
}

void Guard::note_bucket(int width, int height, int frames) {
    bucket_ = std::make_pair(width, height);
    bucket_frames_ = frames;
    step_buckets_.insert(std::int64_t(width) * height);
}

void Guard::step_succeeded(std::int64_t step) {
    ++history_.steps_succeeded;
    history_.trained_bucket_areas.insert(step_buckets_.begin(), step_buckets_.end());
    step_buckets_.clear();
    after_sample_ = false;
    ++steps_on_plan_;
    if (!stable_recorded_ && steps_on_plan_ >= options_.stable_after) record_stable(step);
}

void Guard::finish(std::int64_t step) {
    if (!stable_recorded_ && steps_on_plan_ > 0) record_stable(step);
}

// A new plan starts its own count toward stability.
void Guard::plan_changed() {
    steps_on_plan_ = 0;
    step_seconds_on_plan_ = 0.0;
    stable_recorded_ = false;
}

void Guard::record_stable(std::int64_t step) {
    stable_recorded_ = true;
    const MemoryStats m = device_.stats();
    const double steps_per_second =
        step_seconds_on_plan_ > 0.0 ? double(steps_on_plan_) / step_seconds_on_plan_ : 0.0;
    if (options_.store != nullptr) {
        options_.store->stable({step, steps_on_plan_, run_peak_, steps_per_second, plan_});
    }
    events_.record("stable", {{"step", step},
                              {"steps_on_plan", steps_on_plan_},
                              {"peak", run_peak_},
                              {"total", m.total},
                              {"steps_per_second", steps_per_second},
                              {"plan", describe(plan_)}});
    if (options_.stable_file.empty()) return;
    std::ostringstream out;
    out << "# loom: a plan that trained " << steps_on_plan_
        << " steps without running out of memory.\n"
        << "stable:\n"
        << "  step: " << step << "\n"
        << "  steps_on_plan: " << steps_on_plan_ << "\n"
        << "  device: \"" << device_.description() << "\"\n"
        << "  total_memory: " << m.total << "\n"
        << (options_.ranks > 1 ? "  ranks: " + std::to_string(options_.ranks) + "\n" : "")
        << "  peak_allocated: " << run_peak_ << "\n"
        << "  steps_per_second: " << steps_per_second << "\n"
        << "  loom_version: \"" << kVersion << "\"\n"
        << "  time: \"" << utc_timestamp_now() << "\"\n"
        << "plan:\n";
    std::istringstream plan_lines(plan_to_yaml(plan_));
    for (std::string line; std::getline(plan_lines, line);) {
        if (!line.empty() && line[0] != '#') out << "  " << line << "\n";
    }
    write_file_atomic(options_.stable_file, out.str());
    guard_log().info("{}", to_line(StableLine{steps_on_plan_, describe(plan_)}));
}

}  // namespace loom::guard
