// StoreRecorder: the store as a training run sees it. It records through a StableStore and never
// throws: a store it cannot open costs one warning and is left alone, a write that fails costs
// that record only.

#include <SQLiteCpp/Database.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "loom/store/stable_store.h"
#include "loom/store/store_recorder.h"
#include "store_test_util.h"
#include "temp_dir.h"

namespace loom::store {
namespace {

using test::count_of;
using test::heavy_plan;
using test::light_plan;
using test::make_key;
using test::make_oom;
using test::make_run;
using test::make_stable;

const char* const kNotRecorded =
    "this run's plans are not recorded there (stable.yaml in the run folder still is)";

guard::RunEnd completed(int steps) {
    guard::RunEnd end;
    end.status = "completed";
    end.steps = steps;
    end.plan = light_plan();
    return end;
}

TEST(StoreRecorder, RecordsARunAndAnswersKnownPlans) {
    test::TempDir dir;
    const auto file = dir / "home/stable.db";
    const guard::PlanKey key = make_key();
    StoreRecorder recorder(file);
    EXPECT_FALSE(std::filesystem::exists(file));  // opened on first use only
    EXPECT_FALSE(recorder.known_plans(key).stable);

    recorder.run_started(make_run("portrait", key));
    recorder.oom(make_oom(heavy_plan()));
    recorder.stable(make_stable(light_plan()));
    recorder.run_finished(completed(200));
    EXPECT_TRUE(recorder.enabled());
    EXPECT_EQ(recorder.file(), file);

    StableStore store = StableStore::open(file);
    const std::vector<StableRow> rows = store.list();
    ASSERT_EQ(rows.size(), 1u);
    ASSERT_TRUE(recorder.last_stable_id());
    EXPECT_EQ(*recorder.last_stable_id(), rows[0].id);
    EXPECT_EQ(rows[0].run_status, "completed");

    const guard::KnownPlans known = recorder.known_plans(key);
    ASSERT_EQ(known.failed.size(), 1u);
    EXPECT_EQ(known.failed[0], heavy_plan());
    ASSERT_TRUE(known.stable);
    EXPECT_EQ(known.stable->plan, light_plan());
}

TEST(StoreRecorder, CorruptFileWarnsOnceNeverThrowsAndStaysUntouched) {
    test::TempDir dir;
    const auto file = dir / "stable.db";
    const std::string garbage = "definitely not SQLite\n";
    test::write_bytes(file, garbage);
    test::LogCapture log(dir.path());
    StoreRecorder recorder(file);
    guard::KnownPlans known;
    EXPECT_NO_THROW(known = recorder.known_plans(make_key()));
    EXPECT_TRUE(known.failed.empty());
    EXPECT_FALSE(known.stable);
    EXPECT_NO_THROW(recorder.run_started(make_run("portrait", make_key())));
    EXPECT_NO_THROW(recorder.oom(make_oom(heavy_plan())));
    EXPECT_NO_THROW(recorder.stable(make_stable(light_plan())));
    EXPECT_NO_THROW(recorder.run_finished(completed(10)));
    EXPECT_FALSE(recorder.enabled());
    EXPECT_FALSE(recorder.last_stable_id());

    const std::string text = log.text();
    EXPECT_EQ(count_of(text, kNotRecorded), 1) << text;
    EXPECT_EQ(
        count_of(text, "stable store " + file.string() + ": is damaged or not a SQLite database"),
        1)
        << text;
    EXPECT_EQ(test::read_bytes(file), garbage);
}

TEST(StoreRecorder, NewerSchemaDisablesItWithOneWarning) {
    test::TempDir dir;
    const auto file = dir / "stable.db";
    { StableStore::open(file); }
    {
        SQLite::Database raw(file.string(), SQLite::OPEN_READWRITE);
        raw.exec("PRAGMA user_version = 99");
    }
    test::LogCapture log(dir.path());
    StoreRecorder recorder(file);
    recorder.run_started(make_run("portrait", make_key()));
    recorder.stable(make_stable(light_plan()));
    EXPECT_FALSE(recorder.known_plans(make_key()).stable);
    EXPECT_FALSE(recorder.enabled());
    const std::string text = log.text();
    EXPECT_EQ(count_of(text, "was written by a newer loom (schema 99"), 1) << text;
    EXPECT_EQ(count_of(text, kNotRecorded), 1) << text;
    EXPECT_EQ(test::count_rows(file, "runs"), 0);
}

// Another process holds the write lock past the busy timeout: the records of that moment are
// lost with a warning each, and the recorder records again once the lock is gone, starting
// with the run whose start it could not write.
TEST(StoreRecorder, LockedDatabaseLosesThoseRecordsOnlyAndRecoversAfterwards) {
    test::TempDir dir;
    const auto file = dir / "stable.db";
    { StableStore::open(file); }
    StoreOptions quick;
    quick.busy_timeout = std::chrono::milliseconds(50);
    test::LogCapture log(dir.path());
    StoreRecorder recorder(file, quick);
    {
        SQLite::Database holder(file.string(), SQLite::OPEN_READWRITE);
        holder.exec("BEGIN EXCLUSIVE");
        // WAL readers are not blocked by a writer: the known plans can still be read.
        EXPECT_NO_THROW(recorder.known_plans(make_key()));
        EXPECT_NO_THROW(recorder.run_started(make_run("locked_run", make_key())));
        EXPECT_NO_THROW(recorder.stable(make_stable(light_plan(), 50)));
        EXPECT_TRUE(recorder.enabled());
        EXPECT_FALSE(recorder.last_stable_id());
        holder.exec("ROLLBACK");
    }
    const std::string during = log.text();
    EXPECT_EQ(count_of(during, "the start of run 'locked_run' was not recorded"), 1) << during;
    EXPECT_EQ(count_of(during,
                       "the stable plan at step 50 (nor the start of run 'locked_run') "
                       "was not recorded"),
              1)
        << during;
    EXPECT_GE(count_of(during, "database is locked"), 2) << during;
    EXPECT_EQ(count_of(during, kNotRecorded), 0) << during;

    recorder.stable(make_stable(light_plan(), 100));
    recorder.run_finished(completed(150));
    ASSERT_TRUE(recorder.last_stable_id());
    StableStore store = StableStore::open(file);
    const std::vector<StableRow> rows = store.list();
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].id, *recorder.last_stable_id());
    EXPECT_EQ(rows[0].step, 100);
    EXPECT_EQ(rows[0].run_name, "locked_run");
    EXPECT_EQ(rows[0].run_status, "completed");
}

TEST(StoreRecorder, RecordsBeforeAnyRunAreDroppedWithAWarning) {
    test::TempDir dir;
    const auto file = dir / "stable.db";
    test::LogCapture log(dir.path());
    StoreRecorder recorder(file);
    EXPECT_NO_THROW(recorder.stable(make_stable(light_plan(), 7)));
    EXPECT_FALSE(recorder.last_stable_id());
    EXPECT_EQ(count_of(log.text(),
                       "the stable plan at step 7 was not recorded: no run was "
                       "started before it"),
              1);
    EXPECT_EQ(test::count_rows(file, "stable_plans"), 0);
}

}  // namespace
}  // namespace loom::store
