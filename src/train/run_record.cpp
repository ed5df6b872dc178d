#include "loom/train/run_record.h"

#include "loom/core/logging.h"
#include "loom/train/run_folder.h"

namespace loom {

const char* to_string(RunStatus status) {
    switch (status) {
        case RunStatus::kCompleted: return "completed";
        case RunStatus::kInterrupted: return "interrupted";
        case RunStatus::kStopped: return "stopped";
        case RunStatus::kFailed: return "failed";
    }
    return "failed";
}

RunRecord::RunRecord(const RunFolder& run, RunLockOptions lock)
    : lock_(RunLock::acquire(run.root(), std::move(lock))) {
    run.create();
    add_log_file(run.log_file());
}

RunRecord::~RunRecord() {
    try {
        end(RunStatus::kFailed);  // a no-op when the run recorded its end
    } catch (...) {
        // The run's own error is what the user must see; the store reports its problems itself.
    }
    // A later process of the same job (a resume, the supervisor's restart) must not write into
    // this run's loom.log through a sink left open here.
    close_log_files();
}

void RunRecord::record_in(guard::PlanStore& store, const guard::RunFacts& facts,
                          Progress progress) {
    store.run_started(facts);
    store_ = &store;
    progress_ = std::move(progress);
}

void RunRecord::end(RunStatus status) {
    if (ended_) return;
    ended_ = true;
    if (store_ == nullptr) return;
    guard::RunEnd facts = progress_();
    facts.status = to_string(status);
    store_->run_finished(facts);
}

}  // namespace loom
