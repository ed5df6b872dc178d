#include "loom/store/schema.h"

namespace loom::store {

namespace {

// Schema 1. A run's key lives in plan_keys once and runs refer to it; stable plans and OOM events
// belong to a run and reach the key through it, so no row can contradict its run's key. Plans
// are plan.yaml text (guard::plan_to_yaml), which stays readable in `sqlite3` and survives new
// knobs better than one column per knob. Times are ISO 8601 UTC text with milliseconds.
// A forgotten stable plan keeps its row (forgotten_at set) so its ID is never handed out again.
const char* const kSchema1 = R"sql(
CREATE TABLE plan_keys (
    id INTEGER PRIMARY KEY,
    arch TEXT NOT NULL,
    model_fingerprint TEXT NOT NULL,
    device_name TEXT NOT NULL,
    total_memory INTEGER NOT NULL,
    dtype TEXT NOT NULL,
    rank INTEGER NOT NULL,
    max_resolution INTEGER NOT NULL,
    frames INTEGER NOT NULL,
    UNIQUE (arch, model_fingerprint, device_name, total_memory, dtype, rank, max_resolution,
            frames)
);

CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    key_id INTEGER NOT NULL REFERENCES plan_keys (id),
    name TEXT NOT NULL,
    run_folder TEXT NOT NULL,
    process_index INTEGER NOT NULL CHECK (process_index >= 0),
    job_yaml TEXT NOT NULL,
    start_plan TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'running'
        CHECK (status IN ('running', 'completed', 'interrupted', 'stopped', 'failed')),
    end_plan TEXT,
    steps INTEGER,
    ooms INTEGER,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    loom_version TEXT NOT NULL
);
CREATE INDEX runs_by_key ON runs (key_id);

CREATE TABLE stable_plans (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs (id),
    plan TEXT NOT NULL,
    step INTEGER NOT NULL,
    steps_on_plan INTEGER NOT NULL,
    peak INTEGER NOT NULL,
    steps_per_second REAL NOT NULL,
    loom_version TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    forgotten_at TEXT
);
CREATE INDEX stable_plans_by_run ON stable_plans (run_id);

CREATE TABLE oom_events (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs (id),
    recorded_at TEXT NOT NULL,
    phase TEXT NOT NULL,
    step INTEGER,
    kind TEXT NOT NULL,
    bytes_requested INTEGER,
    in_use INTEGER NOT NULL,
    total INTEGER NOT NULL,
    plan TEXT NOT NULL,
    injected INTEGER NOT NULL CHECK (injected IN (0, 1)),
    message TEXT NOT NULL
);
CREATE INDEX oom_events_by_run ON oom_events (run_id);
)sql";

// Schema 2 (issue 21): the key carries the job's qtypes, since a plan stable at low_vram level
// 2 in uint4 is not one in qfloat8. SQLite cannot change a UNIQUE constraint in place, so the
// table is rebuilt as lang_altertable.html's "other kinds of table schema changes" says (open_
// database runs migrations with foreign keys off and checks them before committing). Keys
// recorded before were level 2's bf16 or jobs that never reached it; they read as qfloat8, the
// qtype level 2 uses when a job names none.
const char* const kSchema2 = R"sql(
CREATE TABLE plan_keys_2 (
    id INTEGER PRIMARY KEY,
    arch TEXT NOT NULL,
    model_fingerprint TEXT NOT NULL,
    device_name TEXT NOT NULL,
    total_memory INTEGER NOT NULL,
    dtype TEXT NOT NULL,
    rank INTEGER NOT NULL,
    max_resolution INTEGER NOT NULL,
    frames INTEGER NOT NULL,
    qtype TEXT NOT NULL,
    UNIQUE (arch, model_fingerprint, device_name, total_memory, dtype, rank, max_resolution,
            frames, qtype)
);
INSERT INTO plan_keys_2 (id, arch, model_fingerprint, device_name, total_memory, dtype, rank,
                         max_resolution, frames, qtype)
    SELECT id, arch, model_fingerprint, device_name, total_memory, dtype, rank, max_resolution,
           frames, 'qfloat8' FROM plan_keys;
DROP TABLE plan_keys;
ALTER TABLE plan_keys_2 RENAME TO plan_keys;
)sql";

}  // namespace

const std::vector<Migration>& schema_migrations() {
    static const std::vector<Migration> kMigrations = {
        {1, kSchema1},
        {2, kSchema2},
    };
    return kMigrations;
}

}  // namespace loom::store
