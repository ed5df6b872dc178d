#include "loom/store/stable_store.h"

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Statement.h>
#include <SQLiteCpp/Transaction.h>

#include <cmath>
#include <utility>

#include "loom/core/logging.h"
#include "loom/core/version.h"
#include "loom/guard/event_log.h"
#include "open_database.h"

namespace loom::store {

namespace {

// SQLite integers are signed 64-bit; byte counts are unsigned. The cast round-trips every value
// (a byte count above 2^63 would read back intact, though no device has one).
std::int64_t to_db(std::uint64_t value) {
    return static_cast<std::int64_t>(value);
}
std::uint64_t from_db(std::int64_t value) {
    return static_cast<std::uint64_t>(value);
}

// Runs `body`, turning a SQLite failure into a StoreError that says what was being done.
template <class Body>
auto guarded(const std::filesystem::path& file, const std::string& doing, Body&& body)
    -> decltype(body()) {
    try {
        return body();
    } catch (const SQLite::Exception& e) {
        throw store_error(file, doing, e);
    }
}

// The columns of plan_keys in the order every statement below binds and reads them.
const char* const kKeyMatch =
    "arch = ? AND model_fingerprint = ? AND device_name = ? AND total_memory = ? AND dtype = ? "
    "AND rank = ? AND max_resolution = ? AND frames = ? AND qtype = ?";

void bind_key(SQLite::Statement& statement, int first, const guard::PlanKey& key) {
    statement.bind(first, key.arch);
    statement.bind(first + 1, key.model_fingerprint);
    statement.bind(first + 2, key.device_name);
    statement.bind(first + 3, to_db(key.total_memory));
    statement.bind(first + 4, key.dtype);
    statement.bind(first + 5, key.rank);
    statement.bind(first + 6, key.max_resolution);
    statement.bind(first + 7, key.frames);
    statement.bind(first + 8, key.qtype);
}

std::optional<std::int64_t> find_key_id(SQLite::Database& db, const guard::PlanKey& key) {
    SQLite::Statement query(db, std::string("SELECT id FROM plan_keys WHERE ") + kKeyMatch);
    bind_key(query, 1, key);
    if (!query.executeStep()) return std::nullopt;
    return query.getColumn(0).getInt64();
}

// Call inside a write transaction, so two processes cannot both insert the same key.
std::int64_t key_id_for(SQLite::Database& db, const guard::PlanKey& key) {
    if (auto id = find_key_id(db, key)) return *id;
    SQLite::Statement insert(db,
                             "INSERT INTO plan_keys (arch, model_fingerprint, device_name, "
                             "total_memory, dtype, rank, max_resolution, frames, qtype) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
    bind_key(insert, 1, key);
    insert.exec();
    return db.getLastInsertRowid();
}

void bind_optional(SQLite::Statement& statement, int index,
                   const std::optional<std::int64_t>& value) {
    if (value) {
        statement.bind(index, *value);
    } else {
        statement.bind(index);  // NULL
    }
}

std::optional<std::int64_t> optional_int(const SQLite::Column& column) {
    if (column.isNull()) return std::nullopt;
    return column.getInt64();
}

// SQLite stores NaN as NULL, which the NOT NULL column would refuse: a rate that could not be
// measured (no time elapsed) is recorded as 0.
double finite_or_zero(double value) {
    return std::isfinite(value) ? value : 0.0;
}

RecordedPlan read_plan(std::string yaml, const std::string& source) {
    RecordedPlan recorded;
    recorded.yaml = std::move(yaml);
    try {
        recorded.plan = guard::parse_plan(recorded.yaml, source);
    } catch (const std::exception& e) {
        recorded.error = e.what();
        // parse_plan's advice ("delete the file ...") is for a run folder's plan.yaml; a row
        // is not deleted by hand, and readers say what they do with it instead.
        const std::size_t advice = recorded.error.find("; delete ");
        if (advice != std::string::npos) recorded.error.erase(advice);
    }
    return recorded;
}

std::string row_source(const std::filesystem::path& file, const char* table, std::int64_t id) {
    return file.string() + " " + table + " #" + std::to_string(id);
}

// The SELECT shared by list() and find(); callers append WHERE conditions after "1 = 1".
// The nine plan_keys columns from `first` on, in the table's order.
guard::PlanKey read_key(SQLite::Statement& q, int first) {
    guard::PlanKey key;
    key.arch = q.getColumn(first).getString();
    key.model_fingerprint = q.getColumn(first + 1).getString();
    key.device_name = q.getColumn(first + 2).getString();
    key.total_memory = from_db(q.getColumn(first + 3).getInt64());
    key.dtype = q.getColumn(first + 4).getString();
    key.rank = q.getColumn(first + 5).getInt();
    key.max_resolution = q.getColumn(first + 6).getInt();
    key.frames = q.getColumn(first + 7).getInt();
    key.qtype = q.getColumn(first + 8).getString();
    return key;
}

const char* const kStableRowQuery =
    "SELECT s.id, s.plan, s.step, s.steps_on_plan, s.peak, s.steps_per_second, s.loom_version, "
    "s.recorded_at, r.id, r.name, r.run_folder, r.status, r.job_yaml, r.process_index, k.arch, "
    "k.model_fingerprint, k.device_name, k.total_memory, k.dtype, k.rank, k.max_resolution, "
    "k.frames, k.qtype "
    "FROM stable_plans s JOIN runs r ON r.id = s.run_id JOIN plan_keys k ON k.id = r.key_id "
    "WHERE s.forgotten_at IS NULL";

StableRow read_stable_row(SQLite::Statement& q, const std::filesystem::path& file) {
    StableRow row;
    row.id = q.getColumn(0).getInt64();
    row.plan = read_plan(q.getColumn(1).getString(), row_source(file, "stable_plans", row.id));
    row.step = q.getColumn(2).getInt64();
    row.steps_on_plan = q.getColumn(3).getInt64();
    row.peak = from_db(q.getColumn(4).getInt64());
    row.steps_per_second = q.getColumn(5).getDouble();
    row.loom_version = q.getColumn(6).getString();
    row.time = q.getColumn(7).getString();
    row.run_id = q.getColumn(8).getInt64();
    row.run_name = q.getColumn(9).getString();
    row.run_folder = q.getColumn(10).getString();
    row.run_status = q.getColumn(11).getString();
    row.job_yaml = q.getColumn(12).getString();
    row.process_index = static_cast<std::size_t>(q.getColumn(13).getInt64());
    row.key = read_key(q, 14);
    return row;
}

const char* const kOomRowQuery =
    "SELECT o.id, o.run_id, r.name, o.recorded_at, o.phase, o.step, o.kind, o.bytes_requested, "
    "o.in_use, o.total, o.plan, o.injected, o.message "
    "FROM oom_events o JOIN runs r ON r.id = o.run_id ";

std::vector<OomRow> read_oom_rows(SQLite::Statement& q, const std::filesystem::path& file) {
    std::vector<OomRow> rows;
    while (q.executeStep()) {
        OomRow row;
        row.id = q.getColumn(0).getInt64();
        row.run_id = q.getColumn(1).getInt64();
        row.run_name = q.getColumn(2).getString();
        row.time = q.getColumn(3).getString();
        row.phase = q.getColumn(4).getString();
        row.step = optional_int(q.getColumn(5));
        row.kind = q.getColumn(6).getString();
        if (auto bytes = optional_int(q.getColumn(7))) row.bytes_requested = from_db(*bytes);
        row.in_use = from_db(q.getColumn(8).getInt64());
        row.total = from_db(q.getColumn(9).getInt64());
        row.plan = read_plan(q.getColumn(10).getString(), row_source(file, "oom_events", row.id));
        row.injected = q.getColumn(11).getInt() != 0;
        row.message = q.getColumn(12).getString();
        rows.push_back(std::move(row));
    }
    return rows;
}

}  // namespace

StableStore StableStore::open(const std::filesystem::path& file, const StoreOptions& options) {
    return StableStore(file, open_database(file, options));
}

StableStore::StableStore(std::filesystem::path file, std::unique_ptr<SQLite::Database> db)
    : file_(std::move(file)), db_(std::move(db)) {}

StableStore::StableStore(StableStore&&) noexcept = default;
StableStore& StableStore::operator=(StableStore&&) noexcept = default;
StableStore::~StableStore() = default;

int StableStore::schema_version() {
    return guarded(file_, "reading its schema version", [&] { return read_schema_version(*db_); });
}

std::int64_t StableStore::add_run(const guard::RunFacts& run) {
    return guarded(file_, "recording the start of run '" + run.name + "'", [&] {
        SQLite::Transaction transaction(*db_, SQLite::TransactionBehavior::IMMEDIATE);
        const std::int64_t key_id = key_id_for(*db_, run.key);
        SQLite::Statement insert(*db_,
                                 "INSERT INTO runs (key_id, name, run_folder, process_index, "
                                 "job_yaml, start_plan, started_at, loom_version) "
                                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
        insert.bind(1, key_id);
        insert.bind(2, run.name);
        insert.bind(3, run.run_folder);
        insert.bind(4, static_cast<std::int64_t>(run.process_index));
        insert.bind(5, run.job_yaml);
        insert.bind(6, guard::plan_to_yaml(run.plan));
        insert.bind(7, guard::utc_timestamp_now());
        insert.bind(8, kVersion);
        insert.exec();
        const std::int64_t run_id = db_->getLastInsertRowid();
        transaction.commit();
        return run_id;
    });
}

void StableStore::add_oom(std::int64_t run_id, const guard::OomFacts& oom) {
    guarded(file_, "recording an out-of-memory error of run #" + std::to_string(run_id), [&] {
        SQLite::Transaction transaction(*db_, SQLite::TransactionBehavior::IMMEDIATE);
        SQLite::Statement insert(*db_,
                                 "INSERT INTO oom_events (run_id, recorded_at, phase, step, kind, "
                                 "bytes_requested, in_use, total, plan, injected, message) "
                                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
        insert.bind(1, run_id);
        insert.bind(2, guard::utc_timestamp_now());
        insert.bind(3, oom.phase);
        bind_optional(insert, 4, oom.step);
        insert.bind(5, oom.kind);
        bind_optional(insert, 6,
                      oom.bytes_requested ? std::optional<std::int64_t>(to_db(*oom.bytes_requested))
                                          : std::nullopt);
        insert.bind(7, to_db(oom.in_use));
        insert.bind(8, to_db(oom.total));
        insert.bind(9, guard::plan_to_yaml(oom.plan));
        insert.bind(10, oom.injected ? 1 : 0);
        insert.bind(11, oom.message);
        insert.exec();
        transaction.commit();
    });
}

std::int64_t StableStore::add_stable(std::int64_t run_id, const guard::StableFacts& stable) {
    return guarded(file_, "recording a stable plan of run #" + std::to_string(run_id), [&] {
        SQLite::Transaction transaction(*db_, SQLite::TransactionBehavior::IMMEDIATE);
        SQLite::Statement insert(*db_,
                                 "INSERT INTO stable_plans (run_id, plan, step, steps_on_plan, "
                                 "peak, steps_per_second, loom_version, recorded_at) "
                                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
        insert.bind(1, run_id);
        insert.bind(2, guard::plan_to_yaml(stable.plan));
        insert.bind(3, stable.step);
        insert.bind(4, stable.steps_on_plan);
        insert.bind(5, to_db(stable.peak));
        insert.bind(6, finite_or_zero(stable.steps_per_second));
        insert.bind(7, kVersion);
        insert.bind(8, guard::utc_timestamp_now());
        insert.exec();
        const std::int64_t id = db_->getLastInsertRowid();
        transaction.commit();
        return id;
    });
}

void StableStore::finish_run(std::int64_t run_id, const guard::RunEnd& end) {
    if (end.status != "completed" && end.status != "interrupted" && end.status != "stopped" &&
        end.status != "failed") {
        throw StoreError(file_, "cannot record the end of run #" + std::to_string(run_id) +
                                    " as '" + end.status +
                                    "': a run ends 'completed', 'interrupted', 'stopped' or "
                                    "'failed'");
    }
    guarded(file_, "recording the end of run #" + std::to_string(run_id), [&] {
        SQLite::Transaction transaction(*db_, SQLite::TransactionBehavior::IMMEDIATE);
        SQLite::Statement update(*db_,
                                 "UPDATE runs SET status = ?, end_plan = ?, steps = ?, ooms = ?, "
                                 "finished_at = ? WHERE id = ?");
        update.bind(1, end.status);
        update.bind(2, guard::plan_to_yaml(end.plan));
        update.bind(3, end.steps);
        update.bind(4, end.ooms);
        update.bind(5, guard::utc_timestamp_now());
        update.bind(6, run_id);
        if (update.exec() == 0) {
            throw StoreError(file_, "has no run #" + std::to_string(run_id) +
                                        " to record the end of (was it recorded in another file?)");
        }
        transaction.commit();
    });
}

guard::KnownPlans StableStore::known_plans(const guard::PlanKey& key) {
    return guarded(file_, "reading the known plans", [&] {
        guard::KnownPlans known;
        // One read transaction: both queries see the same snapshot even while others write.
        SQLite::Transaction snapshot(*db_);
        const std::optional<std::int64_t> key_id = find_key_id(*db_, key);
        if (!key_id) return known;

        // Grouped by the plan text, oldest first, so the list reads like the runs' history.
        SQLite::Statement failed(*db_,
                                 "SELECT min(o.id), o.plan FROM oom_events o "
                                 "JOIN runs r ON r.id = o.run_id "
                                 "WHERE r.key_id = ? AND o.injected = 0 "
                                 "GROUP BY o.plan ORDER BY min(o.id)");
        failed.bind(1, *key_id);
        while (failed.executeStep()) {
            const std::int64_t id = failed.getColumn(0).getInt64();
            RecordedPlan recorded =
                read_plan(failed.getColumn(1).getString(), row_source(file_, "oom_events", id));
            if (!recorded.plan) {
                logger("store").warn("{}; this loom cannot read that plan and skips it",
                                     recorded.error);
                continue;
            }
            // Two texts can still parse to one plan (a loom that formats plans differently).
            bool seen = false;
            for (const guard::Plan& p : known.failed) seen = seen || p == *recorded.plan;
            if (!seen) known.failed.push_back(*recorded.plan);
        }

        SQLite::Statement stable(*db_,
                                 "SELECT s.id, s.plan, r.name, s.recorded_at FROM stable_plans s "
                                 "JOIN runs r ON r.id = s.run_id "
                                 "WHERE r.key_id = ? AND s.forgotten_at IS NULL "
                                 "ORDER BY s.id DESC");
        stable.bind(1, *key_id);
        while (stable.executeStep()) {
            const std::int64_t id = stable.getColumn(0).getInt64();
            RecordedPlan recorded =
                read_plan(stable.getColumn(1).getString(), row_source(file_, "stable_plans", id));
            if (!recorded.plan) {
                logger("store").warn("{}; this loom cannot read that plan and skips it",
                                     recorded.error);
                continue;
            }
            known.stable = guard::StoredStable{id, *recorded.plan, stable.getColumn(2).getString(),
                                               stable.getColumn(3).getString()};
            break;
        }
        snapshot.commit();
        return known;
    });
}

std::vector<StableRow> StableStore::list(const ListFilter& filter) {
    return guarded(file_, "listing the stable plans", [&] {
        std::string sql = kStableRowQuery;
        if (filter.arch) sql += " AND k.arch = ?";
        // instr() rather than LIKE: a device name may contain '%' or '_'.
        if (filter.device) sql += " AND instr(lower(k.device_name), lower(?)) > 0";
        sql += " ORDER BY s.id DESC";
        SQLite::Statement query(*db_, sql);
        int index = 1;
        if (filter.arch) query.bind(index++, *filter.arch);
        if (filter.device) query.bind(index++, *filter.device);
        std::vector<StableRow> rows;
        while (query.executeStep()) rows.push_back(read_stable_row(query, file_));
        return rows;
    });
}

std::optional<StableRow> StableStore::find(std::int64_t id) {
    return guarded(file_, "reading stable plan #" + std::to_string(id), [&] {
        SQLite::Statement query(*db_, std::string(kStableRowQuery) + " AND s.id = ?");
        query.bind(1, id);
        std::optional<StableRow> row;
        if (query.executeStep()) row = read_stable_row(query, file_);
        return row;
    });
}

bool StableStore::forget(std::int64_t id) {
    return guarded(file_, "forgetting stable plan #" + std::to_string(id), [&] {
        SQLite::Transaction transaction(*db_, SQLite::TransactionBehavior::IMMEDIATE);
        SQLite::Statement update(
            *db_, "UPDATE stable_plans SET forgotten_at = ? WHERE id = ? AND forgotten_at IS NULL");
        update.bind(1, guard::utc_timestamp_now());
        update.bind(2, id);
        const bool changed = update.exec() > 0;
        transaction.commit();
        return changed;
    });
}

std::vector<OomRow> StableStore::ooms_for_run(std::int64_t run_id) {
    return guarded(file_, "reading the out-of-memory errors of run #" + std::to_string(run_id),
                   [&] {
                       SQLite::Statement query(
                           *db_, std::string(kOomRowQuery) + "WHERE o.run_id = ? ORDER BY o.id");
                       query.bind(1, run_id);
                       return read_oom_rows(query, file_);
                   });
}

std::vector<OomRow> StableStore::ooms_for_key(const guard::PlanKey& key) {
    return guarded(file_, "reading the out-of-memory errors of a key", [&] {
        SQLite::Transaction snapshot(*db_);
        std::vector<OomRow> rows;
        if (const std::optional<std::int64_t> key_id = find_key_id(*db_, key)) {
            SQLite::Statement query(*db_,
                                    std::string(kOomRowQuery) + "WHERE r.key_id = ? ORDER BY o.id");
            query.bind(1, *key_id);
            rows = read_oom_rows(query, file_);
        }
        snapshot.commit();
        return rows;
    });
}

std::vector<RunRow> StableStore::runs_with_key_of(const std::string& run_folder) {
    return guarded(file_, "reading the runs recorded like " + run_folder, [&] {
        SQLite::Transaction snapshot(*db_);
        std::vector<RunRow> rows;
        SQLite::Statement key(
            *db_, "SELECT key_id FROM runs WHERE run_folder = ? ORDER BY id DESC LIMIT 1");
        key.bind(1, run_folder);
        if (key.executeStep()) {
            SQLite::Statement query(
                *db_,
                "SELECT r.id, r.name, r.run_folder, r.status, r.started_at, r.finished_at, "
                "r.steps, "
                "r.ooms, r.start_plan, r.end_plan, k.arch, k.model_fingerprint, k.device_name, "
                "k.total_memory, k.dtype, k.rank, k.max_resolution, k.frames, k.qtype "
                "FROM runs r JOIN plan_keys k ON k.id = r.key_id WHERE r.key_id = ? ORDER BY r.id");
            query.bind(1, key.getColumn(0).getInt64());
            while (query.executeStep()) {
                RunRow row;
                row.id = query.getColumn(0).getInt64();
                row.name = query.getColumn(1).getString();
                row.run_folder = query.getColumn(2).getString();
                row.status = query.getColumn(3).getString();
                row.started = query.getColumn(4).getString();
                if (!query.getColumn(5).isNull()) row.finished = query.getColumn(5).getString();
                row.steps = optional_int(query.getColumn(6));
                row.ooms = optional_int(query.getColumn(7));
                const std::string source = row_source(file_, "runs", row.id);
                row.start_plan = read_plan(query.getColumn(8).getString(), source);
                if (!query.getColumn(9).isNull()) {
                    row.end_plan = read_plan(query.getColumn(9).getString(), source);
                }
                row.key = read_key(query, 10);
                rows.push_back(std::move(row));
            }
        }
        snapshot.commit();
        return rows;
    });
}

}  // namespace loom::store
