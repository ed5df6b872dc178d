#pragma once

// The stable-config store (DESIGN.md "Stability and reuse"): one SQLite file that every run on
// the machine records into — its start, its out-of-memory errors, the plans that proved stable,
// its end — and that the next run with the same key asks which plans are already known to fail
// or to fit. `loom stable list|show|export|forget` read and edit it.
//
// Concurrency: several training processes may record into the same file at once. The database
// runs in WAL mode, every write is one short `BEGIN IMMEDIATE` transaction, and a connection
// waits up to StoreOptions::busy_timeout for another writer instead of failing. One StableStore
// is one connection: use it from one thread at a time (each process or thread opens its own).
//
// Errors: every failure throws StoreError naming the file, what loom was doing and what to do.
// A damaged file is never deleted, truncated or rewritten; a file written by a newer loom is
// refused untouched.
//
// Plain C++: no torch, and no SQLite types in this header.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/guard/plan.h"
#include "loom/guard/plan_store.h"
#include "loom/store/schema.h"
#include "loom/store/store_error.h"

namespace SQLite {
class Database;
}

namespace loom::store {

struct StoreOptions {
    // How long a write waits for another process's transaction before it fails with "database
    // is locked". Training processes write a handful of short rows, so 10 s is generous.
    std::chrono::milliseconds busy_timeout{10'000};
    // The schema to bring the database to; tests pass their own list to exercise upgrades.
    std::vector<Migration> migrations = schema_migrations();
};

// A plan as a row stores it: the plan.yaml text, and the Plan when this loom can read it (a row
// written by another loom version may carry knobs this one does not know). Readers skip or
// report unreadable plans; they never fail the whole query for one row.
struct RecordedPlan {
    std::string yaml;
    std::optional<guard::Plan> plan;
    std::string error;  // why `plan` is empty: parse_plan's message naming the row
};

// One stable plan with its key and the run that recorded it.
struct StableRow {
    std::int64_t id = 0;
    guard::PlanKey key;
    RecordedPlan plan;
    std::int64_t step = 0;           // the training step it was recorded at
    std::int64_t steps_on_plan = 0;  // steps trained on this plan before it counted as stable
    std::uint64_t peak = 0;          // bytes: the run's highest device memory in use
    double steps_per_second = 0.0;
    std::string loom_version;  // the loom that recorded it
    std::string time;          // ISO 8601 UTC with milliseconds
    std::int64_t run_id = 0;
    std::string run_name;
    std::string run_folder;
    std::string run_status;  // "running", "completed", "interrupted", "failed"
    std::string job_yaml;    // the run's whole job, as loom read it (for export)
    std::size_t process_index = 0;
};

// One recorded out-of-memory error.
struct OomRow {
    std::int64_t id = 0;
    std::int64_t run_id = 0;
    std::string run_name;
    std::string time;
    std::string phase;
    std::optional<std::int64_t> step;
    std::string kind;
    std::optional<std::uint64_t> bytes_requested;
    std::uint64_t in_use = 0;
    std::uint64_t total = 0;
    RecordedPlan plan;  // the plan that failed
    bool injected = false;
    std::string message;
};

// One recorded run.
struct RunRow {
    std::int64_t id = 0;
    guard::PlanKey key;
    std::string name;
    std::string run_folder;
    std::string status;  // "running", "completed", "interrupted", "stopped", "failed"
    std::string started;
    std::string finished;  // empty while running
    std::optional<std::int64_t> steps;
    std::optional<std::int64_t> ooms;
    RecordedPlan start_plan;
    std::optional<RecordedPlan> end_plan;
};

struct ListFilter {
    std::optional<std::string> arch;    // exact: "sd1", "sdxl"
    std::optional<std::string> device;  // a case-insensitive part of the device name: "h200"
};

class StableStore {
  public:
    // Opens `file`, creating it and its folder when missing, and brings its schema up to the
    // newest of `options.migrations`. Throws StoreError when the folder or file cannot be
    // created or opened, when the file is not a SQLite database or is damaged (the file is left
    // as it was), when it is some other program's database, or when its schema is newer than
    // this loom knows. Throws loom::Error when `options.migrations` is not numbered 1, 2, ..., N.
    static StableStore open(const std::filesystem::path& file, const StoreOptions& options = {});

    StableStore(StableStore&&) noexcept;
    StableStore& operator=(StableStore&&) noexcept;
    ~StableStore();

    const std::filesystem::path& file() const { return file_; }
    // The schema version the file is at (PRAGMA user_version).
    int schema_version();

    // --- Recording: each call is one transaction, visible to other processes once it returns.

    // A run begins; returns its ID for the other calls.
    std::int64_t add_run(const guard::RunFacts& run);
    void add_oom(std::int64_t run_id, const guard::OomFacts& oom);
    // Returns the stable plan's ID (what `loom stable show` takes).
    std::int64_t add_stable(std::int64_t run_id, const guard::StableFacts& stable);
    // Throws StoreError for an unknown run ID or a status other than "completed",
    // "interrupted" or "failed".
    void finish_run(std::int64_t run_id, const guard::RunEnd& end);

    // --- Reading.

    // For a run about to start: the distinct plans that ran out of memory on this key (injected
    // faults excluded), oldest first, and the newest stable plan that is not forgotten. Rows whose
    // plan this loom cannot read are skipped with a warning.
    guard::KnownPlans known_plans(const guard::PlanKey& key);
    // Stable plans that are not forgotten, newest first.
    std::vector<StableRow> list(const ListFilter& filter = {});
    // The stable plan with this ID; nullopt when there is none or it was forgotten.
    std::optional<StableRow> find(std::int64_t id);
    // Hides a stable plan from list, find and known_plans for good. False when there is no
    // such plan (or it was forgotten already).
    bool forget(std::int64_t id);
    // Out-of-memory errors in recording order, injected ones included (they say so).
    std::vector<OomRow> ooms_for_run(std::int64_t run_id);
    std::vector<OomRow> ooms_for_key(const guard::PlanKey& key);
    // Every run recorded with the key of the newest run recorded in `run_folder` (the absolute
    // path the trainer records), oldest first; empty when no run was recorded there.
    std::vector<RunRow> runs_with_key_of(const std::string& run_folder);

  private:
    StableStore(std::filesystem::path file, std::unique_ptr<SQLite::Database> db);

    std::filesystem::path file_;
    std::unique_ptr<SQLite::Database> db_;
};

}  // namespace loom::store
