#pragma once

// What the supervisor (supervisor.h) does when its child has ended: pass the end through as
// loom's exit code, restart after a backoff — one rung down the host ladder first when the
// host's out-of-memory killer is taken for the cause — or give up once oom.max_restarts is
// spent. Decisions only: the processes are child_process.h's, the words supervisor.cpp's.

#include <cstddef>
#include <optional>

#include "child_process.h"
#include "loom/config/job.h"
#include "loom/guard/ladder_policy.h"
#include "loom/train/run_folder.h"

namespace loom::cli {

struct AfterChild {
    enum class Action {
        kExit,     // loom exits with exit_code
        kRestart,  // a restart after backoff_seconds
        kGiveUp,   // restarts spent
    };
    Action action = Action::kExit;
    int exit_code = 0;
    double backoff_seconds = 0.0;
};

// `end` is the child's end; `stop_requested` whether the parent was asked to stop; `restarts`
// how many times this process was restarted already. A restart or a give-up counts the end as
// one more death of the process.
AfterChild decide_after_child(const ChildEnd& end, bool stop_requested, int restarts,
                              int max_restarts);

// 0.5 s, 1 s, 2 s, 4 s, 5 s, 5 s, ... for restart 1, 2, 3, ...
double backoff_seconds(int restart);

RunFolder run_folder_of(const config::ProcessConfig& process);
// The child runs the processes in order: a death belongs to the first one without a final LoRA.
std::size_t current_process(const config::Job& job);

// The host's OOM killer took the child: plan.yaml goes one rung down the host ladder (caches to
// disk, then fewer CPU threads), and the restarted child starts from it. nullopt when plan.yaml
// cannot be read (the child reports that itself).
std::optional<guard::Decision> step_down_after_death(const config::ProcessConfig& process,
                                                     const RunFolder& run);

}  // namespace loom::cli
