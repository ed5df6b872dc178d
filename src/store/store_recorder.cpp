#include "loom/store/store_recorder.h"

#include <exception>
#include <utility>

#include "loom/core/logging.h"

namespace loom::store {

StoreRecorder::StoreRecorder(std::filesystem::path file, StoreOptions options)
    : file_(std::move(file)), options_(std::move(options)) {}

StoreRecorder::~StoreRecorder() = default;

namespace {

// The recorder must not throw, not even from its own warnings (a message that cannot be built,
// a log file on a full disk): a warning that cannot be written is dropped.
void warn(const std::string& message) noexcept {
    try {
        logger("store").warn("{}", message);
    } catch (...) {
    }
}

}  // namespace

StableStore* StoreRecorder::store() noexcept {
    if (store_) return &*store_;
    if (disabled_) return nullptr;
    // Once is enough: every later call would fail the same way, and the run goes on.
    try {
        store_.emplace(StableStore::open(file_, options_));
        return &*store_;
    } catch (const StoreError& e) {
        disabled_ = true;
        warn_disabled(e.what());
    } catch (const std::exception& e) {
        disabled_ = true;
        warn_disabled(file_.string() + ": " + e.what());
    } catch (...) {
        disabled_ = true;
        warn_disabled(file_.string() + ": an unknown error");
    }
    return nullptr;
}

// `cause` starts with the file name (a StoreError's message does).
void StoreRecorder::warn_disabled(const std::string& cause) const noexcept {
    try {
        warn("stable store " + cause +
             "; this run's plans are not recorded there (stable.yaml in the run folder still is)");
    } catch (...) {
    }
}

// `cause` names the file when it is a StoreError's message, as it is for every SQLite failure.
void StoreRecorder::warn_lost(const std::string& record, const char* cause) const noexcept {
    try {
        warn("stable store: " + record + " was not recorded: " + cause);
    } catch (...) {
    }
}

std::optional<std::int64_t> StoreRecorder::run_id(StableStore& store, const std::string& record) {
    if (run_id_) return run_id_;
    if (!run_) {
        warn_lost(record, "no run was started before it");
        return std::nullopt;
    }
    try {
        run_id_ = store.add_run(*run_);
    } catch (const std::exception& e) {
        warn_lost(record + " (nor the start of run '" + run_->name + "')", e.what());
    }
    return run_id_;
}

guard::KnownPlans StoreRecorder::known_plans(const guard::PlanKey& key) {
    StableStore* s = store();
    if (s == nullptr) return {};
    try {
        return s->known_plans(key);
    } catch (const std::exception& e) {
        warn(std::string("stable store: the known plans could not be read (") + e.what() +
             "); this run starts from its own settings");
    } catch (...) {
    }
    return {};
}

void StoreRecorder::run_started(const guard::RunFacts& run) {
    // A new run: later records belong to it, even when its start cannot be written now.
    run_id_.reset();
    last_stable_id_.reset();
    try {
        run_ = run;
        StableStore* s = store();
        if (s == nullptr) return;
        run_id_ = s->add_run(run);
    } catch (const std::exception& e) {
        warn_lost("the start of run '" + run.name + "'", e.what());
    } catch (...) {
    }
}

void StoreRecorder::oom(const guard::OomFacts& oom) {
    try {
        StableStore* s = store();
        if (s == nullptr) return;
        const std::string record = "the out-of-memory error in " + oom.phase +
                                   (oom.step ? " at step " + std::to_string(*oom.step) : "");
        const std::optional<std::int64_t> id = run_id(*s, record);
        if (!id) return;
        try {
            s->add_oom(*id, oom);
        } catch (const std::exception& e) {
            warn_lost(record, e.what());
        }
    } catch (...) {
    }
}

void StoreRecorder::stable(const guard::StableFacts& stable) {
    try {
        StableStore* s = store();
        if (s == nullptr) return;
        const std::string record = "the stable plan at step " + std::to_string(stable.step);
        const std::optional<std::int64_t> id = run_id(*s, record);
        if (!id) return;
        try {
            last_stable_id_ = s->add_stable(*id, stable);
        } catch (const std::exception& e) {
            warn_lost(record, e.what());
        }
    } catch (...) {
    }
}

void StoreRecorder::run_finished(const guard::RunEnd& end) {
    try {
        StableStore* s = store();
        if (s == nullptr) return;
        const std::string record = "the end of the run (" + end.status + ")";
        const std::optional<std::int64_t> id = run_id(*s, record);
        if (!id) return;
        try {
            s->finish_run(*id, end);
        } catch (const std::exception& e) {
            warn_lost(record, e.what());
        }
    } catch (...) {
    }
}

}  // namespace loom::store
