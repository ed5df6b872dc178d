// The guard with several ranks (issue 23): each attempt ends with the group's outcome, and an
// OOM on one rank makes every rank drop the attempt, take rank 0's one decision (from the
// failing rank's event) and retry the same work under the same plan. The ranks are threads here,
// agreeing through a shared table instead of c10d (dist/ does that over Gloo); the texts they
// exchange are the real ones.

#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "loom/core/byte_size.h"
#include "loom/core/error.h"
#include "loom/device/device.h"
#include "loom/guard/guard.h"
#include "loom/guard/rank_agreement.h"

namespace loom::guard {
namespace {

namespace fs = std::filesystem;

// Every rank's text to every rank, through one table and a barrier.
class Table {
  public:
    explicit Table(int ranks) : texts_(std::size_t(ranks)), ranks_(ranks) {}
    std::vector<std::string> exchange(int rank, const std::string& text) {
        std::unique_lock<std::mutex> lock(mutex_);
        texts_[std::size_t(rank)] = text;
        arrive(lock);
        std::vector<std::string> all = texts_;
        arrive(lock);  // nobody writes the next round before everyone has read this one
        return all;
    }

  private:
    void arrive(std::unique_lock<std::mutex>& lock) {
        const std::uint64_t generation = generation_;
        if (++arrived_ == ranks_) {
            arrived_ = 0;
            ++generation_;
            cv_.notify_all();
        } else {
            cv_.wait(lock, [&] { return generation_ != generation; });
        }
    }
    std::mutex mutex_;
    std::condition_variable cv_;
    std::vector<std::string> texts_;
    int ranks_;
    int arrived_ = 0;
    std::uint64_t generation_ = 0;
};

class TableAgreement final : public RankAgreement {
  public:
    TableAgreement(Table& table, int rank) : table_(table), rank_(rank) {}
    int rank() const override { return rank_; }
    bool any(bool failed_here) override {
        for (const std::string& t : table_.exchange(rank_, failed_here ? "1" : "0"))
            if (t == "1") return true;
        return false;
    }
    std::vector<std::string> gather(const std::string& mine) override {
        return table_.exchange(rank_, mine);
    }
    std::string from_leader(const std::string& text) override {
        return table_.exchange(rank_, text).front();
    }

  private:
    Table& table_;
    int rank_;
};

struct NoTarget final : public GuardedTarget {
    int released = 0;
    void release_after_oom() override { ++released; }
    void apply_plan(const Plan&, const Plan&) override {}
    BucketFacts bucket_facts() const override { return {}; }
};

struct RankOutcome {
    Plan plan;
    int attempts = 0;
    int released = 0;
    std::vector<nlohmann::json> events;
};

// One training step on `ranks` ranks; rank r's attempt runs out of memory while
// ooms_by_rank[r] > 0 (one fewer each time).
std::vector<RankOutcome> step_on_ranks(int ranks, std::vector<int> ooms_by_rank) {
    const std::unique_ptr<Device> device = open_device({DeviceKind::kSim, 0}, 100 * kMiB);
    Table table(ranks);
    std::vector<RankOutcome> out(static_cast<std::size_t>(ranks));
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) {
        threads.emplace_back([&, r] {
            const fs::path file =
                fs::temp_directory_path() / ("loom_rank_agreement_" + std::to_string(::getpid()) +
                                             "_" + std::to_string(r) + ".jsonl");
            fs::remove(file);
            {
                Plan plan;
                plan.batch_size = 4;
                plan.gradient_accumulation = 1;
                plan.gradient_checkpointing = false;
                plan.sample.enabled = false;
                TableAgreement agreement(table, r);
                GuardOptions options;
                options.agreement = &agreement;
                options.measure = true;  // not taken with several ranks
                EventLog events(file);
                Guard guard(*device, plan, options, events);
                NoTarget target;
                guard.set_target(&target);
                RankOutcome& o = out[std::size_t(r)];
                guard.run(Phase::kTrainStep, 1, [&] {
                    ++o.attempts;
                    if (ooms_by_rank[std::size_t(r)]-- > 0) {
                        throw c10::OutOfMemoryError(
                            "sim out of memory. Tried to allocate 2.00 MiB; rank " +
                            std::to_string(r));
                    }
                });
                o.plan = guard.plan();
                o.released = target.released;
            }
            std::ifstream in(file);
            for (std::string line; std::getline(in, line);)
                out[std::size_t(r)].events.push_back(nlohmann::json::parse(line));
            fs::remove(file);
        });
    }
    for (std::thread& t : threads) t.join();
    return out;
}

std::vector<std::string> rules_of(const RankOutcome& o) {
    std::vector<std::string> rules;
    for (const auto& e : o.events)
        if (e["event"] == "change") rules.push_back(e["rule"].get<std::string>());
    return rules;
}

TEST(RankAgreement, AnOomOnOneRankIsEveryRanksRungAndRetry) {
    for (int ranks : {2, 3}) {
        SCOPED_TRACE(std::to_string(ranks) + " ranks");
        std::vector<int> ooms(std::size_t(ranks), 0);
        ooms[1] = 1;  // rank 1 alone runs out of memory, once
        const std::vector<RankOutcome> out = step_on_ranks(ranks, ooms);
        for (int r = 0; r < ranks; ++r) {
            SCOPED_TRACE("rank " + std::to_string(r));
            const RankOutcome& o = out[std::size_t(r)];
            EXPECT_EQ(o.attempts, 2);  // the attempt dropped everywhere, the same work again
            EXPECT_EQ(o.released, 1);  // what the dropped attempt kept is let go on every rank
            EXPECT_EQ(o.plan, out[0].plan);
            EXPECT_TRUE(o.plan.gradient_checkpointing);  // the image ladder's first rung
            EXPECT_EQ(rules_of(o), (std::vector<std::string>{"train.gradient_checkpointing"}));
            // Every rank records rank 1's event, the one that decided.
            const auto oom = std::find_if(o.events.begin(), o.events.end(),
                                          [](const auto& e) { return e["event"] == "oom"; });
            ASSERT_NE(oom, o.events.end());
            EXPECT_NE((*oom)["message"].get<std::string>().find("rank 1"), std::string::npos);
        }
    }
}

TEST(RankAgreement, OomsOnSeveralRanksAreOneDecisionPerAttempt) {
    // Ranks 0 and 2 fail the first attempt, rank 2 the second too: two rungs, the same on all.
    const std::vector<RankOutcome> out = step_on_ranks(3, {1, 0, 2});
    for (const RankOutcome& o : out) {
        EXPECT_EQ(o.attempts, 3);
        EXPECT_EQ(rules_of(o), rules_of(out[0]));
        EXPECT_EQ(o.plan, out[0].plan);
    }
    EXPECT_EQ(rules_of(out[0]).size(), 2u);
}

TEST(RankAgreement, NobodyFailingIsOneAttempt) {
    for (const RankOutcome& o : step_on_ranks(2, {0, 0})) {
        EXPECT_EQ(o.attempts, 1);
        EXPECT_TRUE(rules_of(o).empty());
    }
}

TEST(RankAgreement, EventsAndDecisionsTravelWhole) {
    OomEvent e;
    e.phase = Phase::kTrainStep;
    e.work = Work::kTrain;
    e.step = 7;
    e.kind = OomKind::kDevice;
    e.bytes_requested = 2 * kMiB;
    e.memory.allocated = 11;
    e.memory.peak_allocated = 13;
    e.memory.total = 17;
    e.memory.free = 3;
    e.bucket = std::make_pair(128, 96);
    e.bucket_frames = 9;
    e.buckets.active = 2;
    e.buckets.largest_area = 128 * 96;
    e.buckets.next_cap = 64 * 64;
    e.buckets.longest_clip = 9;
    e.after_sample = true;
    e.message = "sim out of memory \"quoted\"";
    const OomEvent back = event_from_text(event_to_text(e));
    EXPECT_EQ(event_to_text(back), event_to_text(e));
    EXPECT_EQ(back.bucket, e.bucket);
    EXPECT_EQ(back.buckets.longest_clip, 9);
    Plan from;
    from.frames = 9;
    Decision d;
    d.plan = from;
    d.plan.frames = 5;
    d.rule = "train.fewer_frames";
    d.reason = "frames are a video model's largest memory lever";
    const Decision got = decision_from_text(decision_to_text(d), from);
    EXPECT_EQ(got.plan, d.plan);
    EXPECT_EQ(got.rule, d.rule);
    ASSERT_EQ(got.changes.size(), 1u);
    EXPECT_EQ(got.changes[0].knob, "datasets.num_frames");
    EXPECT_THROW(event_from_text("{}"), FormatError);
}

}  // namespace
}  // namespace loom::guard
