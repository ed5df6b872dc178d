#pragma once

// One run of a job as the outside world sees it: the run folder owned by this trainer alone
// (train/run_lock.h), its loom.log joined to the log sinks while the run lives, and the
// stable-config store's record of the run (its start, and exactly one end status). Whatever way
// Trainer::run leaves — completed, interrupted, the
// --stop-after hook, or an exception unwinding — the destructor closes the log sink, and a run
// that recorded no end is recorded as failed. Used from the training thread only.

#include <cstdint>
#include <functional>
#include <string>

#include "loom/guard/plan.h"
#include "loom/guard/plan_store.h"
#include "loom/train/run_lock.h"

namespace loom {

class RunFolder;

enum class RunStatus {
    kCompleted,    // every step trained, final files written
    kInterrupted,  // stopped on request after a checkpoint (resumable)
    kStopped,      // the --stop-after test hook: as if killed, no final save
    kFailed,       // an error ended it
};
// The store's word for a status: "completed", "interrupted", "stopped", "failed".
const char* to_string(RunStatus status);

class RunRecord {
  public:
    // Takes `run`'s folder (RunLock::acquire with `lock`: throws RunFolderBusyError when
    // another trainer has it), creates it and adds its loom.log to the log sinks.
    RunRecord(const RunFolder& run, RunLockOptions lock);
    ~RunRecord();
    RunRecord(const RunRecord&) = delete;
    RunRecord& operator=(const RunRecord&) = delete;

    // Where the run is at, for the end record (also the failed one an exception leaves).
    using Progress = std::function<guard::RunEnd()>;

    // Records the run's start in `store`; the end goes there too. Without a call (no store, or
    // no key for this model) nothing is recorded.
    void record_in(guard::PlanStore& store, const guard::RunFacts& facts, Progress progress);

    // Records the end once; later calls (and the destructor) add nothing.
    void end(RunStatus status);

  private:
    RunLock lock_;  // released last, after the log sink
    guard::PlanStore* store_ = nullptr;
    Progress progress_;
    bool ended_ = false;
};

}  // namespace loom
