// The stable store: schema creation and migration, refusing files it must not touch, recording
// runs, OOMs and stable plans and reading them back, forgetting, and several processes recording
// into one file at once.

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Statement.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "loom/guard/plan.h"
#include "loom/store/schema.h"
#include "loom/store/stable_store.h"
#include "store_test_util.h"
#include "temp_dir.h"

namespace loom::store {
namespace {

using test::count_rows;
using test::heavy_plan;
using test::light_plan;
using test::make_key;
using test::make_oom;
using test::make_run;
using test::make_stable;
using test::middle_plan;
using test::query_text;

const std::regex kIsoTime(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)");

int newest_schema() {
    return schema_migrations().back().version;
}

// The message StableStore::open gives for a file that is not a database, minus SQLite's words.
void expect_damaged_message(const std::string& message, const std::filesystem::path& file) {
    EXPECT_EQ(message.rfind(file.string() + ": is damaged or not a SQLite database (SQLite: ", 0),
              0u)
        << message;
    EXPECT_NE(message.find("file is not a database"), std::string::npos) << message;
    EXPECT_NE(message.find("; move it aside and loom starts a new store; nothing in your run "
                           "folders depends on it"),
              std::string::npos)
        << message;
}

TEST(StableStoreOpen, CreatesFolderAndSchemaAtNewestVersionInWalMode) {
    test::TempDir dir;
    const auto file = dir / "loom_home/nested/stable.db";
    StableStore store = StableStore::open(file);
    EXPECT_EQ(store.file(), file);
    EXPECT_TRUE(std::filesystem::exists(file));
    EXPECT_EQ(store.schema_version(), newest_schema());
    EXPECT_EQ(query_text(file, "PRAGMA journal_mode"), "wal");
    EXPECT_EQ(query_text(file, "PRAGMA application_id"), std::to_string(kStoreApplicationId));
    for (const char* table : {"plan_keys", "runs", "stable_plans", "oom_events"}) {
        EXPECT_EQ(count_rows(file, table), 0) << table;
    }
}

TEST(StableStoreOpen, ReopeningDoesNotRunMigrationsAgain) {
    test::TempDir dir;
    const auto file = dir / "stable.db";
    StoreOptions options;
    // Run twice, this migration would fail (the table exists) or count 2.
    options.migrations = {{1, "CREATE TABLE opened (n INTEGER); INSERT INTO opened VALUES (1);"}};
    { StableStore::open(file, options); }
    StableStore again = StableStore::open(file, options);
    EXPECT_EQ(again.schema_version(), 1);
    EXPECT_EQ(count_rows(file, "opened"), 1);
}

TEST(StableStoreOpen, ExtraMigrationUpgradesAnOldDatabaseKeepingItsRows) {
    test::TempDir dir;
    const auto file = dir / "stable.db";
    std::int64_t stable_id = 0;
    {
        StableStore v1 = StableStore::open(file);
        const std::int64_t run = v1.add_run(make_run("before_upgrade", make_key()));
        stable_id = v1.add_stable(run, make_stable(light_plan()));
    }
    StoreOptions upgraded;
    upgraded.migrations = schema_migrations();
    upgraded.migrations.push_back({newest_schema() + 1,
                                   "ALTER TABLE runs ADD COLUMN note TEXT; "
                                   "UPDATE runs SET note = 'kept';"});
    StableStore v2 = StableStore::open(file, upgraded);
    EXPECT_EQ(v2.schema_version(), newest_schema() + 1);
    const std::vector<StableRow> rows = v2.list();
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].id, stable_id);
    EXPECT_EQ(rows[0].run_name, "before_upgrade");
    ASSERT_TRUE(rows[0].plan.plan);
    EXPECT_EQ(*rows[0].plan.plan, light_plan());
    EXPECT_EQ(query_text(file, "SELECT note FROM runs"), "kept");
}

// Schema 2 added the qtypes to the key (issue 21). A store of schema 1 keeps every run and
// stable plan; its keys read as qfloat8 (level 2's default), so a job with no qtype still finds
// its old stable plan, and a uint4 job gets a key of its own.
TEST(StableStoreOpen, SchemaOneStoreGetsQTypeKeysAndKeepsItsPlans) {
    test::TempDir dir;
    const auto file = dir / "stable.db";
    StoreOptions v1;
    v1.migrations = {schema_migrations().front()};
    { StableStore::open(file, v1); }
    std::string old_plan = guard::plan_to_yaml(light_plan());  // as schema-1 looms wrote it
    old_plan.erase(old_plan.find("  qtype: qfloat8\n  qtype_te: ~\n"), 31);
    {
        SQLite::Database raw(file.string(), SQLite::OPEN_READWRITE);
        const guard::PlanKey k = make_key();
        SQLite::Statement key(raw,
                              "INSERT INTO plan_keys (arch, model_fingerprint, device_name, "
                              "total_memory, dtype, rank, max_resolution, frames) "
                              "VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
        key.bind(1, k.arch);
        key.bind(2, k.model_fingerprint);
        key.bind(3, k.device_name);
        key.bind(4, static_cast<std::int64_t>(k.total_memory));
        key.bind(5, k.dtype);
        key.bind(6, k.rank);
        key.bind(7, k.max_resolution);
        key.bind(8, k.frames);
        key.exec();
        SQLite::Statement run(
            raw,
            "INSERT INTO runs (key_id, name, run_folder, process_index, job_yaml, "
            "start_plan, started_at, loom_version) "
            "VALUES (1, 'old_run', '/runs/old', 0, 'job: extension', ?, "
            "'2026-11-01T00:00:00.000Z', '0.9')");
        run.bind(1, old_plan);
        run.exec();
        SQLite::Statement stable(raw,
                                 "INSERT INTO stable_plans (run_id, plan, step, steps_on_plan, "
                                 "peak, steps_per_second, loom_version, recorded_at) "
                                 "VALUES (1, ?, 50, 40, 1000, 2.5, '0.9', "
                                 "'2026-11-01T00:10:00.000Z')");
        stable.bind(1, old_plan);
        stable.exec();
    }
    StableStore store = StableStore::open(file);
    EXPECT_EQ(store.schema_version(), newest_schema());
    const std::vector<StableRow> rows = store.list();
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].run_name, "old_run");
    EXPECT_EQ(rows[0].key.qtype, "qfloat8");
    ASSERT_TRUE(rows[0].plan.plan) << rows[0].plan.error;
    EXPECT_EQ(*rows[0].plan.plan, light_plan());
    EXPECT_TRUE(store.known_plans(make_key()).stable.has_value());
    guard::PlanKey uint4 = make_key();
    uint4.qtype = "uint4";
    EXPECT_FALSE(store.known_plans(uint4).stable.has_value());
    store.add_run(make_run("uint4_run", uint4));
    store.add_run(make_run("qfloat8_run", make_key()));
    EXPECT_EQ(count_rows(file, "plan_keys"), 2);
    EXPECT_EQ(query_text(file, "SELECT count(*) FROM runs WHERE key_id = 1"), "2");
    EXPECT_EQ(query_text(file, "SELECT qtype FROM plan_keys WHERE id = 2"), "uint4");
}

TEST(StableStoreOpen, RefusesADatabaseFromANewerLoom) {
    test::TempDir dir;
    const auto file = dir / "stable.db";
    { StableStore::open(file); }
    {
        SQLite::Database raw(file.string(), SQLite::OPEN_READWRITE);
        raw.exec("PRAGMA user_version = " + std::to_string(newest_schema() + 6));
    }
    try {
        StableStore::open(file);
        FAIL() << "a newer schema was accepted";
    } catch (const StoreError& e) {
        EXPECT_EQ(std::string(e.what()),
                  file.string() + ": was written by a newer loom (schema " +
                      std::to_string(newest_schema() + 6) + ", this loom knows up to " +
                      std::to_string(newest_schema()) +
                      "); use that loom or pass --store to use another file");
    }
    EXPECT_EQ(query_text(file, "PRAGMA user_version"), std::to_string(newest_schema() + 6));
}

TEST(StableStoreOpen, TextFileIsRefusedAndLeftByteForByte) {
    test::TempDir dir;
    const auto file = dir / "stable.db";
    const std::string text = "this is not a database\nbut someone's notes\n";
    test::write_bytes(file, text);
    try {
        StableStore::open(file);
        FAIL() << "a text file was opened as a store";
    } catch (const StoreError& e) {
        expect_damaged_message(e.what(), file);
        EXPECT_EQ(e.path(), file.string());
    }
    EXPECT_EQ(test::read_bytes(file), text);
}

TEST(StableStoreOpen, RandomBytesAreRefusedAndLeftByteForByte) {
    test::TempDir dir;
    const auto file = dir / "stable.db";
    std::mt19937 rng(1234);
    std::string bytes(8192, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
    test::write_bytes(file, bytes);
    EXPECT_THROW(
        {
            try {
                StableStore::open(file);
            } catch (const StoreError& e) {
                expect_damaged_message(e.what(), file);
                throw;
            }
        },
        StoreError);
    EXPECT_EQ(test::read_bytes(file), bytes);
}

TEST(StableStoreOpen, RefusesAnotherProgramsDatabaseWithoutTouchingIt) {
    test::TempDir dir;
    const auto file = dir / "notes.db";
    {
        SQLite::Database raw(file.string(), SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
        raw.exec("CREATE TABLE notes (text TEXT); INSERT INTO notes VALUES ('keep me');");
    }
    try {
        StableStore::open(file);
        FAIL() << "a foreign database was opened as a store";
    } catch (const StoreError& e) {
        EXPECT_EQ(std::string(e.what()),
                  file.string() +
                      ": is a SQLite database with tables that are not loom's, not a loom stable "
                      "store; loom leaves it alone: pass --store with another file");
    }
    EXPECT_EQ(query_text(file, "SELECT text FROM notes"), "keep me");
    EXPECT_EQ(query_text(file, "SELECT count(*) FROM sqlite_master WHERE name = 'runs'"), "0");
}

TEST(StableStoreOpen, RefusesMigrationsThatAreNotNumberedInOrder) {
    test::TempDir dir;
    StoreOptions gap;
    gap.migrations = {{1, "CREATE TABLE a (x);"}, {3, "CREATE TABLE b (x);"}};
    EXPECT_THROW(StableStore::open(dir / "stable.db", gap), Error);
}

TEST(StableStoreRecord, KnownPlansGivesFailedPlansAndTheNewestStablePlanOfTheKey) {
    test::TempDir dir;
    StableStore store = StableStore::open(dir / "stable.db");
    const guard::PlanKey key = make_key();
    const guard::PlanKey other_key = make_key("NVIDIA GeForce RTX 4090", 24ull << 30);

    const std::int64_t run = store.add_run(make_run("portrait", key));
    store.add_oom(run, make_oom(heavy_plan()));
    store.add_oom(run, make_oom(heavy_plan()));  // the same plan again: listed once
    store.add_oom(run, make_oom(middle_plan()));
    guard::Plan injected = light_plan();
    injected.batch_size = 3;
    store.add_oom(run, make_oom(injected, /*injected=*/true));  // says nothing about fitting
    const std::int64_t older = store.add_stable(run, make_stable(middle_plan(), 60));
    const std::int64_t newer = store.add_stable(run, make_stable(light_plan(), 120));
    EXPECT_GT(newer, older);

    // Another key's records must not leak into this one's.
    const std::int64_t other_run = store.add_run(make_run("landscape", other_key));
    guard::Plan other_failed = heavy_plan();
    other_failed.batch_size = 8;
    store.add_oom(other_run, make_oom(other_failed));
    const std::int64_t other_stable = store.add_stable(other_run, make_stable(heavy_plan()));

    const guard::KnownPlans known = store.known_plans(key);
    ASSERT_EQ(known.failed.size(), 2u);
    EXPECT_EQ(known.failed[0], heavy_plan());
    EXPECT_EQ(known.failed[1], middle_plan());
    ASSERT_TRUE(known.stable);
    EXPECT_EQ(known.stable->id, newer);
    EXPECT_EQ(known.stable->plan, light_plan());
    EXPECT_EQ(known.stable->run_name, "portrait");
    EXPECT_TRUE(std::regex_match(known.stable->time, kIsoTime)) << known.stable->time;

    const guard::KnownPlans other = store.known_plans(other_key);
    ASSERT_EQ(other.failed.size(), 1u);
    EXPECT_EQ(other.failed[0], other_failed);
    ASSERT_TRUE(other.stable);
    EXPECT_EQ(other.stable->id, other_stable);

    guard::PlanKey unknown = key;
    unknown.rank = 32;
    const guard::KnownPlans nothing = store.known_plans(unknown);
    EXPECT_TRUE(nothing.failed.empty());
    EXPECT_FALSE(nothing.stable);
    // One key row per key, however many runs use it.
    store.add_run(make_run("portrait_again", key));
    EXPECT_EQ(count_rows(store.file(), "plan_keys"), 2);
}

TEST(StableStoreRecord, ListAndFindGiveEveryFieldNewestFirst) {
    test::TempDir dir;
    StableStore store = StableStore::open(dir / "stable.db");
    const guard::PlanKey key = make_key();
    guard::RunFacts run_facts = make_run("portrait", key);
    const std::int64_t run = store.add_run(run_facts);
    guard::StableFacts first = make_stable(middle_plan(), 60);
    const std::int64_t first_id = store.add_stable(run, first);
    guard::StableFacts second = make_stable(light_plan(), 120);
    second.steps_on_plan = 70;
    second.peak = 12345678901ull;
    second.steps_per_second = 1.75;
    const std::int64_t second_id = store.add_stable(run, second);
    const std::int64_t sdxl_run = store.add_run(make_run("sdxl_run", [] {
        guard::PlanKey k = make_key("cpu", 64ull << 30);
        k.arch = "sdxl";
        return k;
    }()));
    const std::int64_t sdxl_id = store.add_stable(sdxl_run, make_stable(heavy_plan()));

    const std::vector<StableRow> rows = store.list();
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_EQ(rows[0].id, sdxl_id);
    EXPECT_EQ(rows[1].id, second_id);
    EXPECT_EQ(rows[2].id, first_id);

    const StableRow& r = rows[1];
    EXPECT_EQ(r.key, key);
    ASSERT_TRUE(r.plan.plan) << r.plan.error;
    EXPECT_EQ(*r.plan.plan, light_plan());
    EXPECT_EQ(r.plan.yaml, guard::plan_to_yaml(light_plan()));
    EXPECT_EQ(r.step, 120);
    EXPECT_EQ(r.steps_on_plan, 70);
    EXPECT_EQ(r.peak, 12345678901ull);
    EXPECT_DOUBLE_EQ(r.steps_per_second, 1.75);
    EXPECT_FALSE(r.loom_version.empty());
    EXPECT_TRUE(std::regex_match(r.time, kIsoTime)) << r.time;
    EXPECT_EQ(r.run_id, run);
    EXPECT_EQ(r.run_name, "portrait");
    EXPECT_EQ(r.run_folder, "/runs/portrait");
    EXPECT_EQ(r.run_status, "running");
    EXPECT_EQ(r.job_yaml, run_facts.job_yaml);
    EXPECT_EQ(r.process_index, 1u);

    ListFilter sd1;
    sd1.arch = "sd1";
    ASSERT_EQ(store.list(sd1).size(), 2u);
    EXPECT_EQ(store.list(sd1)[0].id, second_id);
    ListFilter h200;
    h200.device = "h200";  // any case, any part of the name
    EXPECT_EQ(store.list(h200).size(), 2u);
    ListFilter cpu_sd1;
    cpu_sd1.device = "CPU";
    cpu_sd1.arch = "sd1";
    EXPECT_TRUE(store.list(cpu_sd1).empty());
    ListFilter percent;
    percent.device = "%";  // not a wildcard
    EXPECT_TRUE(store.list(percent).empty());

    const std::optional<StableRow> found = store.find(first_id);
    ASSERT_TRUE(found);
    ASSERT_TRUE(found->plan.plan);
    EXPECT_EQ(*found->plan.plan, middle_plan());
    EXPECT_EQ(found->step, 60);
    EXPECT_FALSE(store.find(second_id + 100));
}

TEST(StableStoreRecord, ForgetHidesAPlanFromListFindAndKnownPlans) {
    test::TempDir dir;
    StableStore store = StableStore::open(dir / "stable.db");
    const guard::PlanKey key = make_key();
    const std::int64_t run = store.add_run(make_run("portrait", key));
    const std::int64_t older = store.add_stable(run, make_stable(middle_plan(), 60));
    const std::int64_t newer = store.add_stable(run, make_stable(light_plan(), 120));

    EXPECT_TRUE(store.forget(newer));
    EXPECT_FALSE(store.find(newer));
    ASSERT_EQ(store.list().size(), 1u);
    EXPECT_EQ(store.list()[0].id, older);
    const guard::KnownPlans known = store.known_plans(key);
    ASSERT_TRUE(known.stable);
    EXPECT_EQ(known.stable->id, older);  // the older plan takes its place
    EXPECT_EQ(known.stable->plan, middle_plan());

    EXPECT_FALSE(store.forget(newer));  // already forgotten
    EXPECT_FALSE(store.forget(newer + 100));
    EXPECT_TRUE(store.forget(older));
    EXPECT_FALSE(store.known_plans(key).stable);
    EXPECT_TRUE(store.list().empty());
    // A new stable plan never gets a forgotten plan's ID.
    EXPECT_GT(store.add_stable(run, make_stable(light_plan())), newer);
}

TEST(StableStoreRecord, FinishRunRecordsTheEnd) {
    test::TempDir dir;
    StableStore store = StableStore::open(dir / "stable.db");
    const std::int64_t run = store.add_run(make_run("portrait", make_key()));
    guard::RunEnd end;
    end.status = "interrupted";
    end.steps = 321;
    end.ooms = 3;
    end.plan = light_plan();
    store.finish_run(run, end);
    const auto file = store.file();
    EXPECT_EQ(query_text(file, "SELECT status FROM runs"), "interrupted");
    EXPECT_EQ(query_text(file, "SELECT steps || '/' || ooms FROM runs"), "321/3");
    EXPECT_EQ(guard::parse_plan(query_text(file, "SELECT end_plan FROM runs"), "end_plan"),
              light_plan());
    EXPECT_TRUE(std::regex_match(query_text(file, "SELECT finished_at FROM runs"), kIsoTime));

    end.status = "exploded";
    EXPECT_THROW(store.finish_run(run, end), StoreError);
    end.status = "completed";
    EXPECT_THROW(store.finish_run(run + 1, end), StoreError);
    EXPECT_EQ(query_text(file, "SELECT status FROM runs"), "interrupted");

    // --stop-after ends a run as "stopped" (as if killed); the schema accepts it.
    end.status = "stopped";
    store.finish_run(run, end);
    EXPECT_EQ(query_text(file, "SELECT status FROM runs"), "stopped");
}

TEST(StableStoreRecord, OomRowsKeepEveryField) {
    test::TempDir dir;
    StableStore store = StableStore::open(dir / "stable.db");
    const guard::PlanKey key = make_key();
    const std::int64_t run = store.add_run(make_run("portrait", key));
    store.add_oom(run, make_oom(heavy_plan()));
    guard::OomFacts sparse = make_oom(middle_plan(), /*injected=*/true);
    sparse.phase = "load";
    sparse.step.reset();
    sparse.bytes_requested.reset();
    sparse.kind = "host";
    sparse.message = "std::bad_alloc";
    store.add_oom(run, sparse);
    const std::int64_t other = store.add_run(make_run("elsewhere", make_key("sim", 1ull << 26)));
    store.add_oom(other, make_oom(light_plan()));

    const std::vector<OomRow> rows = store.ooms_for_run(run);
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0].run_id, run);
    EXPECT_EQ(rows[0].run_name, "portrait");
    EXPECT_EQ(rows[0].phase, "train_step");
    EXPECT_EQ(rows[0].step, std::optional<std::int64_t>(12));
    EXPECT_EQ(rows[0].kind, "device");
    EXPECT_EQ(rows[0].bytes_requested, std::optional<std::uint64_t>(1ull << 30));
    EXPECT_EQ(rows[0].in_use, 79ull << 30);
    EXPECT_EQ(rows[0].total, 80ull << 30);
    ASSERT_TRUE(rows[0].plan.plan);
    EXPECT_EQ(*rows[0].plan.plan, heavy_plan());
    EXPECT_FALSE(rows[0].injected);
    EXPECT_EQ(rows[0].message, "CUDA out of memory. Tried to allocate 1.00 GiB");
    EXPECT_TRUE(std::regex_match(rows[0].time, kIsoTime));
    EXPECT_EQ(rows[1].phase, "load");
    EXPECT_FALSE(rows[1].step);
    EXPECT_FALSE(rows[1].bytes_requested);
    EXPECT_EQ(rows[1].kind, "host");
    EXPECT_TRUE(rows[1].injected);
    EXPECT_EQ(rows[1].message, "std::bad_alloc");

    EXPECT_EQ(store.ooms_for_key(key).size(), 2u);
    EXPECT_EQ(store.ooms_for_key(make_key("sim", 1ull << 26)).size(), 1u);
    EXPECT_TRUE(store.ooms_for_key(make_key("nowhere")).empty());
}

TEST(StableStoreRecord, AnUnreadablePlanRowIsSkippedNotFatal) {
    test::TempDir dir;
    StableStore store = StableStore::open(dir / "stable.db");
    const guard::PlanKey key = make_key();
    const std::int64_t run = store.add_run(make_run("portrait", key));
    const std::int64_t good = store.add_stable(run, make_stable(middle_plan()));
    const std::int64_t bad = store.add_stable(run, make_stable(light_plan()));
    {
        // As a later loom with a knob this one does not know would have written it.
        SQLite::Database raw(store.file().string(), SQLite::OPEN_READWRITE);
        raw.exec("UPDATE stable_plans SET plan = plan || 'future: {knob: 1}\n' WHERE id = " +
                 std::to_string(bad));
    }
    const guard::KnownPlans known = store.known_plans(key);
    ASSERT_TRUE(known.stable);
    EXPECT_EQ(known.stable->id, good);
    const std::optional<StableRow> row = store.find(bad);
    ASSERT_TRUE(row);
    EXPECT_FALSE(row->plan.plan);
    EXPECT_NE(row->plan.error.find("stable_plans #" + std::to_string(bad) +
                                   ": future is not a plan section"),
              std::string::npos)
        << row->plan.error;
    // plan.yaml's advice ("delete the file") does not apply to a row.
    EXPECT_EQ(row->plan.error.find("delete"), std::string::npos) << row->plan.error;
    EXPECT_NE(row->plan.yaml.find("future:"), std::string::npos);
}

// The real deployment: separate training processes, each with its own connection, recording into
// one file at the same moment, starting from a file that does not exist yet (so they also race
// to create the schema).
TEST(StableStoreConcurrency, ProcessesRecordingAtOnceLoseNoRow) {
    test::TempDir dir;
    const auto file = dir / "shared/stable.db";
    constexpr int kProcesses = 6;
    constexpr int kRecordsEach = 20;
    int start_gate[2];
    ASSERT_EQ(::pipe(start_gate), 0);
    std::vector<pid_t> children;
    for (int p = 0; p < kProcesses; ++p) {
        const pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            ::close(start_gate[1]);
            char byte = 0;
            // Every child blocks here until the parent closes the gate, then all start at once.
            (void)::read(start_gate[0], &byte, 1);
            int code = 0;
            try {
                StableStore store = StableStore::open(file);
                const std::int64_t run =
                    store.add_run(make_run("worker_" + std::to_string(p), make_key()));
                for (int i = 0; i < kRecordsEach; ++i) {
                    store.add_oom(run, make_oom(heavy_plan()));
                    store.add_stable(run, make_stable(light_plan(), i));
                }
                guard::RunEnd end;
                end.status = "completed";
                end.steps = kRecordsEach;
                store.finish_run(run, end);
            } catch (const std::exception& e) {
                std::fprintf(stderr, "worker %d: %s\n", p, e.what());
                code = 1;
            }
            ::_exit(code);
        }
        children.push_back(pid);
    }
    ::close(start_gate[0]);
    ::close(start_gate[1]);
    for (pid_t pid : children) {
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a worker failed: " << status;
    }
    EXPECT_EQ(count_rows(file, "runs"), kProcesses);
    EXPECT_EQ(count_rows(file, "plan_keys"), 1);
    EXPECT_EQ(count_rows(file, "stable_plans"), kProcesses * kRecordsEach);
    EXPECT_EQ(count_rows(file, "oom_events"), kProcesses * kRecordsEach);
    EXPECT_EQ(query_text(file, "SELECT count(*) FROM runs WHERE status = 'completed'"),
              std::to_string(kProcesses));
    StableStore store = StableStore::open(file);
    EXPECT_EQ(store.schema_version(), newest_schema());
    EXPECT_EQ(store.list().size(), static_cast<std::size_t>(kProcesses * kRecordsEach));
}

}  // namespace
}  // namespace loom::store
