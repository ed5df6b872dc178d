#include "supervisor.h"

#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

#include "child_process.h"
#include "loom/core/error.h"
#include "loom/core/exit_codes.h"
#include "loom/core/logging.h"
#include "loom/guard/event_log.h"
#include "loom/guard/ladder_policy.h"
#include "loom/guard/plan.h"
#include "loom/report/html_report.h"
#include "loom/train/run_folder.h"
#include "loom/train/run_lock.h"
#include "restart_policy.h"

namespace loom::cli {

namespace {

namespace fs = std::filesystem;

Logger supervisor_log() {
    return logger("guard");
}

std::string changes_text(const std::vector<guard::KnobChange>& changes) {
    std::string out;
    for (const guard::KnobChange& c : changes) {
        if (!out.empty()) out += ", ";
        out += c.knob + " " + c.from + " -> " + c.to;
    }
    return out;
}

// "from the checkpoint at step 4" / "from the start (no checkpoint yet)"
std::string resume_point(const RunFolder& run) {
    const std::optional<std::int64_t> step = run.newest_checkpoint();
    if (!step) return "from the start (no checkpoint yet)";
    return "from the checkpoint at step " + std::to_string(*step);
}

std::string plan_summary(const RunFolder& run) {
    if (!fs::exists(run.plan_yaml())) return "not written yet";
    try {
        return run.plan_yaml().string() + " (" +
               guard::describe(guard::load_plan(run.plan_yaml())) + ")";
    } catch (const Error& e) {
        return e.what();
    }
}

// A line for both the console and the run folder's loom.log (the child is not writing to it).
void warn_in_run_log(const RunFolder& run, const std::string& line) {
    const bool logged = add_log_file(run.log_file());
    supervisor_log().warn("{}", line);
    if (logged) close_log_files();
}

// ---- giving up --------------------------------------------------------------------------------

std::string shell_quote(const std::string& s) {
    const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_./=:,@%+-", c);
    });
    if (plain) return s;
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

std::string rerun_command(const std::vector<std::string>& train_args) {
    std::string out = "loom train";
    for (const std::string& a : child_arguments(train_args, true)) {
        if (a == "loom" || a == "train" || a == "--no-supervise") continue;
        out += ' ';
        out += shell_quote(a);  // appended apart: GCC 12 warns (falsely) on " " + std::string&&
    }
    return out;
}

// "each time by signal 9 (SIGKILL)" / "by signal 9 (SIGKILL) 2 times, exit 75 once"
std::string death_counts(const std::vector<ChildEnd>& deaths) {
    std::vector<std::pair<ChildEnd, int>> counts;
    for (const ChildEnd& d : deaths) {
        auto it =
            std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == d; });
        if (it == counts.end()) {
            counts.emplace_back(d, 1);
        } else {
            ++it->second;
        }
    }
    if (counts.size() == 1) return "each time by " + counts[0].first.cause();
    std::string out = "by ";
    for (std::size_t i = 0; i < counts.size(); ++i) {
        if (i > 0) out += ", ";
        out += counts[i].first.cause() + " " +
               (counts[i].second == 1 ? "once" : std::to_string(counts[i].second) + " times");
    }
    return out;
}

// What the last cause means and what to try.
std::pair<std::string, std::string> explain(const ChildEnd& last, const RunFolder& run,
                                            const std::string& rerun, bool has_checkpoint) {
    const std::string resumes =
        has_checkpoint ? "it resumes from the last checkpoint" : "it starts over";
    if (last.memory_related()) {
        return {
            "a SIGKILL without a word is how the host's out-of-memory killer ends a process "
            "when RAM runs out (or someone ran kill -9); the restarts moved plan.yaml down "
            "the host ladder (events.jsonl lists each rung)",
            "free host RAM (close other programs, or use a machine with more RAM), then rerun `" +
                rerun + "`: " + resumes +
                " on the lighter plan; raise oom.max_restarts to allow more restarts"};
    }
    if (!last.signaled) {
        return {"the training process asked for a restart each time (exit 75)",
                "read the end of " + run.log_file().string() + " and " +
                    run.events_jsonl().string() + " for why, then rerun `" + rerun +
                    "`: " + resumes};
    }
    return {"the training process crashed (SIGBUS can also mean a full disk or /dev/shm)",
            "read the end of " + run.log_file().string() + "; rerun `" + rerun +
                " --no-supervise` to see the crash without restarts, and report it with loom.log "
                "if it repeats"};
}

int give_up(const std::vector<ChildEnd>& deaths, int max_restarts, std::size_t process_index,
            const RunFolder& run, guard::EventLog& events,
            const std::vector<std::string>& train_args) {
    const ChildEnd& last = deaths.back();
    const std::optional<std::int64_t> checkpoint = run.newest_checkpoint();
    events.record("supervisor_gave_up",
                  {{"cause", last.cause()},
                   {"deaths", static_cast<int>(deaths.size())},
                   {"restarts", static_cast<int>(deaths.size()) - 1},
                   {"max_restarts", max_restarts},
                   {"process", static_cast<int>(process_index)},
                   {"checkpoint_step", checkpoint ? *checkpoint : std::int64_t{-1}}});
    const auto [meaning, what_to_try] =
        explain(last, run, rerun_command(train_args), checkpoint.has_value());
    std::ostringstream out;
    out << "error: the training process died " << deaths.size() << " times, "
        << death_counts(deaths) << "; it was restarted " << deaths.size() - 1
        << " times (oom.max_restarts: " << max_restarts << "), so loom stops here\n"
        << "  cause:           " << meaning << "\n"
        << "  run folder:      " << run.root().string() << "\n"
        << "  last checkpoint: "
        << (checkpoint ? run.checkpoint_dir(*checkpoint).string() + " (step " +
                             std::to_string(*checkpoint) + ")"
                       : std::string("none (no attempt got to its first checkpoint)"))
        << "\n"
        << "  plan:            " << plan_summary(run) << "\n"
        << "  events:          " << run.events_jsonl().string() << "\n"
        << "  try:             " << what_to_try << "\n";
    std::cerr << out.str();
    try {  // the report says how the run ended (its history comes with the next `loom report`)
        report::write_report(run.root(), run.root() / "report.html", std::nullopt,
                             "the training process died " + std::to_string(deaths.size()) +
                                 " times (" + meaning + "); try: " + what_to_try);
    } catch (const std::exception& e) {
        supervisor_log().warn("report.html not written: {}", e.what());
    }
    const bool logged = add_log_file(run.log_file());
    supervisor_log().debug("{}", out.str());
    if (logged) close_log_files();
    return to_int(ExitCode::kFailure);
}

}  // namespace

int supervise_training(const config::Job& job, const std::vector<std::string>& train_args,
                       bool wait_for_run_folders, int ranks) {
    ParentSignals signals;
    // The parent owns every run folder of the job while it supervises; its children (restarts
    // included) train under that ownership, and a SIGKILL of the parent leaves the lock to the
    // child until it has checkpointed and gone.
    std::vector<RunLock> locks;
    RunLockOptions lock_options;
    lock_options.wait = wait_for_run_folders;
    lock_options.cancelled = [] { return stop_requested(); };
    for (const config::ProcessConfig& process : job.config.process) {
        locks.push_back(RunLock::acquire(run_folder_of(process).root(), lock_options));
        locks.back().share_with_children();
    }
    std::map<std::size_t, std::vector<ChildEnd>> deaths;  // per process
    for (bool restart = false;; restart = true) {
        if (stop_requested()) return to_int(ExitCode::kInterrupted);
        const ChildEnd end = run_child(child_arguments(train_args, restart), ranks);
        const std::size_t index = current_process(job);
        const config::ProcessConfig& process = job.config.process[index];
        std::vector<ChildEnd>& seen = deaths[index];
        const int max_restarts = process.oom.max_restarts;
        const AfterChild after =
            decide_after_child(end, stop_requested(), static_cast<int>(seen.size()), max_restarts);
        if (after.action == AfterChild::Action::kExit) {
            if (stop_requested() && end.signaled && end.code == SIGKILL &&
                stop_signal_count() > 1) {
                const RunFolder run = run_folder_of(process);
                supervisor_log().warn(
                    "ended the training process at once on a second stop signal; a rerun "
                    "resumes {} in {}",
                    resume_point(run), run.root().string());
            }
            return after.exit_code;
        }

        const RunFolder run = run_folder_of(process);
        fs::create_directories(run.root());
        guard::EventLog events(run.events_jsonl());
        seen.push_back(end);
        if (after.action == AfterChild::Action::kGiveUp) {
            return give_up(seen, max_restarts, index, run, events, train_args);
        }
        const int restart_number = static_cast<int>(seen.size());
        const double wait = after.backoff_seconds;
        std::optional<guard::Decision> decision;
        if (end.memory_related()) decision = step_down_after_death(process, run);
        std::vector<guard::EventField> fields = {
            {"cause", end.cause()},
            {"attempt", restart_number},
            {"max_restarts", max_restarts},
            {"process", static_cast<int>(index)},
            {"memory_related", end.memory_related()},
            {"resume_step", run.newest_checkpoint().value_or(0)},
            {"backoff_seconds", wait}};
        fields.emplace_back(end.signaled ? "signal" : "exit_code", end.code);
        std::string plan_note = "on the same plan";
        if (decision) {
            fields.emplace_back("action", guard::to_string(decision->action));
            fields.emplace_back("rule", decision->rule);
            fields.emplace_back("reason", decision->reason);
            fields.emplace_back("changes", changes_text(decision->changes));
            fields.emplace_back("plan", guard::describe(decision->plan));
            plan_note =
                decision->action == guard::Decision::Action::kRetry
                    ? "with " + changes_text(decision->changes) + " (" + decision->rule + ")"
                    : "on the same plan (" + decision->reason + ")";
        }
        events.record("restart", fields);
        warn_in_run_log(
            run, format("the training process died ({}{}); restart {} of {} in {:.1f} s, {} {}",
                        end.cause(),
                        end.memory_related() ? ": taken for the host's out-of-memory killer" : "",
                        restart_number, max_restarts, wait, resume_point(run), plan_note));
        back_off(wait);
    }
}

}  // namespace loom::cli
