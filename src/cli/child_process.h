#pragma once

// The supervisor's children (supervisor.h): the training process, or one process per rank, run
// as this executable again with `--no-supervise`; the parent's stop signals forwarded to them
// (the first as SIGTERM, a second as SIGKILL); and how each ended. Process control only: what to
// do after an end is restart_policy.h's, and what to tell the user is supervisor.cpp's.

#include <string>
#include <vector>

namespace loom::cli {

struct ChildEnd {
    bool signaled = false;
    int code = 0;  // the exit code, or the signal when signaled

    // "signal 9 (SIGKILL)", "exit 75"
    std::string cause() const;
    // Ended by SIGINT or SIGTERM (a stop asked from outside, not a crash).
    bool stopped_from_outside() const;
    // Deaths that cannot be caught in-process, and a child asking for a restart.
    bool restartable() const;
    // SIGKILL without a word: taken for the host's out-of-memory killer.
    bool memory_related() const;
    bool operator==(const ChildEnd& o) const { return signaled == o.signaled && code == o.code; }
};

// Forwards SIGINT/SIGTERM to the running children while it lives (one at a time).
class ParentSignals {
  public:
    ParentSignals();
    ~ParentSignals();
    ParentSignals(const ParentSignals&) = delete;
    ParentSignals& operator=(const ParentSignals&) = delete;
};

// Whether a stop signal has arrived, and how many.
bool stop_requested();
int stop_signal_count();

// `loom train --no-supervise <args>`; restarts drop --fresh so the child resumes from the run
// folder's checkpoint and plan.yaml, and --nproc stays with the parent (the children are the
// ranks it starts). The flag goes first so that a `--` among the arguments cannot turn it into a
// positional.
std::vector<std::string> child_arguments(const std::vector<std::string>& train_args, bool restart);

// The training child, or with `ranks` > 1 one child per rank (torchrun's variables set, a
// fresh rendezvous port each time), until it ends. The ranks end together: the first that ends
// otherwise than with exit 0 or on a stop request has the others ended at once with SIGKILL —
// they would otherwise wait for it until their collectives time out — and its end is the
// group's.
ChildEnd run_child(const std::vector<std::string>& args, int ranks);

// Sleeps `seconds`, or less when a stop signal arrives.
void back_off(double seconds);

}  // namespace loom::cli
