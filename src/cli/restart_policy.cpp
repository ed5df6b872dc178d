#include "restart_policy.h"

#include <algorithm>
#include <filesystem>
#include <thread>

#include "loom/core/error.h"
#include "loom/core/exit_codes.h"
#include "loom/core/logging.h"
#include "loom/guard/plan.h"
#include "loom/lora/target_rules.h"

namespace loom::cli {

namespace fs = std::filesystem;

namespace {

constexpr double kFirstBackoffSeconds = 0.5;
constexpr double kMaxBackoffSeconds = 5.0;

}  // namespace

AfterChild decide_after_child(const ChildEnd& end, bool stop_requested, int restarts,
                              int max_restarts) {
    AfterChild after;
    if (stop_requested) {
        // Asked to stop: no restart. A child that finished or failed on its own says so.
        after.exit_code = end.signaled || end.code == to_int(ExitCode::kRestartRequested)
                              ? to_int(ExitCode::kInterrupted)
                              : end.code;
        return after;
    }
    if (end.stopped_from_outside()) {
        after.exit_code = to_int(ExitCode::kInterrupted);
        return after;
    }
    if (!end.restartable()) {
        after.exit_code = end.code;
        return after;
    }
    if (restarts >= max_restarts) {
        after.action = AfterChild::Action::kGiveUp;
        after.exit_code = to_int(ExitCode::kFailure);
        return after;
    }
    after.action = AfterChild::Action::kRestart;
    after.backoff_seconds = backoff_seconds(restarts + 1);
    return after;
}

// 0.5 s, 1 s, 2 s, 4 s, 5 s, 5 s, ... for restart 1, 2, 3, ...
double backoff_seconds(int restart) {
    double s = kFirstBackoffSeconds;
    for (int i = 1; i < restart && s < kMaxBackoffSeconds; ++i) s *= 2.0;
    return std::min(s, kMaxBackoffSeconds);
}

RunFolder run_folder_of(const config::ProcessConfig& process) {
    RunFolder run(*process.training_folder, *process.name);
    run.set_lora_suffixes(lora_file_suffixes(lora_model_of(process)));
    return run;
}

std::size_t current_process(const config::Job& job) {
    const std::vector<config::ProcessConfig>& processes = job.config.process;
    for (std::size_t i = 0; i < processes.size(); ++i) {
        if (!run_folder_of(processes[i]).has_final_lora()) return i;
    }
    return processes.size() - 1;
}

std::optional<guard::Decision> step_down_after_death(const config::ProcessConfig& process,
                                                     const RunFolder& run) {
    guard::Plan plan;
    try {
        plan = fs::exists(run.plan_yaml()) ? guard::load_plan(run.plan_yaml())
                                           : guard::plan_from_job(process);
    } catch (const Error& e) {
        logger("guard").warn("{}; restarting on the plan as it is", e.what());
        return std::nullopt;
    }
    guard::PolicyContext context;
    context.host_threads = static_cast<int>(std::thread::hardware_concurrency());
    guard::Decision decision = guard::decide_after_death(plan, context);
    if (decision.action == guard::Decision::Action::kRetry) {
        guard::save_plan(run.plan_yaml(), decision.plan);
    }
    return decision;
}

}  // namespace loom::cli
