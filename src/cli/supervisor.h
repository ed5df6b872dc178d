#pragma once

// The supervisor (DESIGN.md "Recovery specification", "Supervisor"): `loom train` runs training
// in a child process — this executable again, with `--no-supervise` — and restarts it after a
// death that cannot be caught in-process:
//
//   death by a signal (SIGKILL from the host's OOM killer, SIGSEGV, SIGBUS, SIGABRT, ...) or
//   exit 75 ("restart me")     → restart, at most oom.max_restarts times per process, after a
//                                 backoff of 0.5 s doubling up to 5 s; a SIGKILL is taken for
//                                 the host's OOM killer, so the run folder's plan.yaml first
//                                 goes one rung down the host ladder
//   any other exit code (0, 1, 2, 3, 4, 5, 130, ...) → passed through as loom's exit code
//   SIGINT/SIGTERM to the parent → forwarded to the child as SIGTERM (it checkpoints after its
//                                 running step and exits 130); no restart; a second one ends
//                                 the child at once with SIGKILL
//   the limit reached           → a message naming the cause, the run folder and its last
//                                 checkpoint, and exit code 1
//
// The child resumes by itself from the run folder's last complete checkpoint and plan.yaml
// (restarts drop `--fresh`). Every restart and the give-up are records in the run folder's
// events.jsonl. The parent does no torch work: it reads the job, reads and writes plan.yaml and
// events.jsonl, and waits. Not thread-safe; one supervisor per process (it owns the SIGINT and
// SIGTERM handlers while it runs).

#include <string>
#include <vector>

#include "loom/config/job.h"

namespace loom::cli {

// Runs `loom train <train_args...> --no-supervise` as a child until it ends for good; returns
// loom's exit code. `job` is the job those arguments load (the parent loaded it to validate it
// and to find the run folders).
// The parent owns the job's run folders (train/run_lock.h) for the whole supervision and shares
// them with each child; `wait_for_run_folders` waits for a folder another trainer owns.
// With `ranks` > 1 (`loom train --nproc N`) the child is a group of N ranks of a data-parallel
// run, started with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and a free
// MASTER_PORT on the loopback); the first rank to die ends the others at once, and the group is
// restarted (from the last checkpoint) or given up on as one child would be.
constexpr int kMaxRanks = 64;
int supervise_training(const config::Job& job, const std::vector<std::string>& train_args,
                       bool wait_for_run_folders, int ranks = 1);

}  // namespace loom::cli
