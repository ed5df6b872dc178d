// The guard's measured choice (issue 22): after a training-step OOM with the probe on, the costly
// rungs that keep what is trained are measured through the target and the fastest that fits is
// taken; when nothing fits, or the target cannot measure, the documented order stands. After a
// rung that cannot be undone (low_vram), the earlier costly changes are measured undone. A fake
// target stands for the trainer: its measurements are given, so the choice is what is tested.

#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "loom/core/byte_size.h"
#include "loom/device/device.h"
#include "loom/guard/guard.h"

namespace loom::guard {
namespace {

namespace fs = std::filesystem;

class FakeTarget final : public GuardedTarget {
  public:
    std::map<std::string, std::optional<Measurement>> by_plan;  // describe(plan) -> measurement
    // A plan not in by_plan: out of memory, or (can_measure false) no measurement at all.
    bool can_measure = true;
    std::vector<std::string> measured;
    void release_after_oom() override {}
    void apply_plan(const Plan&, const Plan&) override {}
    BucketFacts bucket_facts() const override { return {}; }
    std::optional<Measurement> measure(const Plan&, const Plan& candidate) override {
        if (!can_measure) return std::nullopt;
        measured.push_back(describe(candidate));
        auto it = by_plan.find(describe(candidate));
        return it == by_plan.end() ? Measurement{false, 100 * kMiB, 0.0} : it->second;
    }
};

// A trainer with a memory and time model: the weights by low_vram level plus activations by
// micro-batch (checkpointing keeps 30%); step time grows with the micro-batches, checkpointing's
// recompute, bf16 casts (level 2) and streaming (level 3). Its training step runs out of memory
// above the 100 MiB device, and it measures what it would run.
class ModelTarget final : public GuardedTarget {
  public:
    explicit ModelTarget(double activation_mib) : activation_mib_(activation_mib) {}
    std::uint64_t peak(const Plan& p) const {
        static constexpr double kWeights[] = {40, 30, 15, 5};
        const double act = p.batch_size * activation_mib_ * (p.gradient_checkpointing ? 0.3 : 1.0);
        return static_cast<std::uint64_t>((kWeights[p.low_vram] + act) * double(kMiB));
    }
    double seconds(const Plan& p) const {
        double micro = 0.010 + 0.005 * p.batch_size;
        if (p.gradient_checkpointing) micro *= 1.3;
        if (p.low_vram >= 2) micro *= 1.2;
        if (p.low_vram >= 3) micro *= 1.1;
        return micro * p.gradient_accumulation;
    }
    bool runs(const Plan& p) const { return peak(p) <= 100 * kMiB; }
    void release_after_oom() override {}
    void apply_plan(const Plan&, const Plan&) override {}
    BucketFacts bucket_facts() const override { return {}; }
    std::optional<Measurement> measure(const Plan&, const Plan& candidate) override {
        ++measurements;
        if (!runs(candidate)) return Measurement{false, 100 * kMiB, 0.0};
        return Measurement{true, peak(candidate), seconds(candidate)};
    }
    int measurements = 0;

  private:
    double activation_mib_;
};

class MeasuredChoiceTest : public ::testing::Test {
  protected:
    void SetUp() override {
        events_file_ = fs::temp_directory_path() /
                       ("loom_measured_choice_" + std::to_string(::getpid()) + ".jsonl");
        fs::remove(events_file_);
        device_ = open_device({DeviceKind::kSim, 0}, 100 * kMiB);
        plan_.batch_size = 4;
        plan_.gradient_accumulation = 1;
        plan_.gradient_checkpointing = false;
        plan_.sample.enabled = false;
    }
    void TearDown() override { fs::remove(events_file_); }

    Plan with_checkpointing() const {
        Plan p = plan_;
        p.gradient_checkpointing = true;
        return p;
    }
    Plan batch_one() const {
        Plan p = plan_;
        p.batch_size = 1;
        p.gradient_accumulation = 4;
        return p;
    }

    // One training step under `options` that runs out of memory `ooms` times; returns the plan
    // it trained with.
    Plan run_step(FakeTarget& target, const GuardOptions& options, int ooms = 1) {
        EventLog events(events_file_);
        Guard guard(*device_, plan_, options, events);
        guard.set_target(&target);
        int attempts = 0;
        guard.run(Phase::kTrainStep, 1, [&] {
            if (attempts++ < ooms) {
                throw c10::OutOfMemoryError("sim out of memory. Tried to allocate 2.00 MiB");
            }
        });
        return guard.plan();
    }

    // The same with checkpointing x batch only (no low_vram levels): six candidates.
    Plan step_once(FakeTarget& target, bool measure = true, int ooms = 1) {
        GuardOptions options;
        options.measure = measure;
        options.context.low_vram_levels = 0;
        return run_step(target, options, ooms);
    }

    std::vector<nlohmann::json> events(const std::string& name) const {
        std::vector<nlohmann::json> out;
        std::ifstream in(events_file_);
        for (std::string line; std::getline(in, line);) {
            nlohmann::json j = nlohmann::json::parse(line);
            if (j.value("event", "") == name) out.push_back(j);
        }
        return out;
    }

    fs::path events_file_;
    std::unique_ptr<Device> device_;
    Plan plan_;
};

TEST_F(MeasuredChoiceTest, TheFastestPlanThatFitsWinsOverTheGuidesOrder) {
    FakeTarget target;
    target.by_plan[describe(with_checkpointing())] = Measurement{true, 60 * kMiB, 0.30};
    target.by_plan[describe(batch_one())] = Measurement{true, 40 * kMiB, 0.10};
    EXPECT_EQ(step_once(target), batch_one());
    // The documented plan first; the other four of checkpointing x batch 4, 2, 1 after it.
    ASSERT_EQ(target.measured.size(), 5u);
    EXPECT_EQ(target.measured[0], describe(with_checkpointing()));
    ASSERT_EQ(events("measure").size(), 5u);
    const auto change = events("change");
    ASSERT_EQ(change.size(), 1u);
    // The one rung that makes exactly this change names it.
    EXPECT_EQ(change[0]["rule"], "train.batch_1_accumulate");
    EXPECT_NE(change[0]["reason"].get<std::string>().find("measured:"), std::string::npos);
    ASSERT_EQ(events("measured_choice").size(), 1u);
    EXPECT_EQ(events("measured_choice")[0]["documented"], "train.gradient_checkpointing");
}

TEST_F(MeasuredChoiceTest, APlanNoRungMakesIsTakenUnderItsOwnRule) {
    FakeTarget target;
    Plan gc_two = with_checkpointing();
    gc_two.batch_size = 2;
    gc_two.gradient_accumulation = 2;
    target.by_plan[describe(with_checkpointing())] = Measurement{true, 60 * kMiB, 0.30};
    target.by_plan[describe(gc_two)] = Measurement{true, 50 * kMiB, 0.20};
    EXPECT_EQ(step_once(target), gc_two);
    EXPECT_EQ(events("change").at(0)["rule"], "measured.fastest");
}

TEST_F(MeasuredChoiceTest, ATieGoesToTheGuidesOrderAndAPlanWithoutHeadroomDoesNotCount) {
    FakeTarget target;
    target.by_plan[describe(with_checkpointing())] = Measurement{true, 60 * kMiB, 0.100};
    target.by_plan[describe(batch_one())] = Measurement{true, 40 * kMiB, 0.092};  // within 10%
    EXPECT_EQ(step_once(target), with_checkpointing());
    // Faster, but over the 95% line of the 100 MiB device: it does not count as fitting.
    target.by_plan[describe(batch_one())] = Measurement{true, 97 * kMiB, 0.01};
    EXPECT_EQ(step_once(target), with_checkpointing());
    // The documented plan needs no headroom: it is what the guide's order would run anyway.
    target.by_plan[describe(with_checkpointing())] = Measurement{true, 98 * kMiB, 0.100};
    target.by_plan[describe(batch_one())] = Measurement{true, 40 * kMiB, 0.300};
    EXPECT_EQ(step_once(target), with_checkpointing());
}

TEST_F(MeasuredChoiceTest, NothingFitsOrNothingMeasuredKeepsTheDocumentedOrder) {
    FakeTarget target;  // every plan out of memory
    EXPECT_EQ(step_once(target), with_checkpointing());
    FakeTarget cannot;  // the target cannot measure yet
    cannot.can_measure = false;
    EXPECT_EQ(step_once(cannot), with_checkpointing());
    FakeTarget off;  // the probe off: nothing is measured at all
    off.by_plan[describe(batch_one())] = Measurement{true, 10 * kMiB, 0.01};
    EXPECT_EQ(step_once(off, /*measure=*/false), with_checkpointing());
    EXPECT_TRUE(off.measured.empty());
}

// A plan measured out of memory rules out the candidates that need at least as much: with
// checkpointing on already, the documented batch 1 is measured first; out of memory, it rules
// out batch 2 (the only other candidate), and the documented order stands.
TEST_F(MeasuredChoiceTest, WhatNeedsAtLeastAPlanThatDidNotFitIsNotMeasured) {
    plan_.gradient_checkpointing = true;
    FakeTarget target;  // every plan out of memory
    Plan one = batch_one();
    EXPECT_EQ(step_once(target), one);
    ASSERT_EQ(target.measured.size(), 1u);
    EXPECT_EQ(target.measured[0], describe(one));
}

// Video: the guide halves the frames first; with that room, checkpointing and the micro-batch
// are measured against each other around the shorter clip rather than assumed — here the clip's
// own plan still does not fit, and checkpointing at batch 2 beats the guide's next rung (batch 1).
TEST_F(MeasuredChoiceTest, VideoMeasuresBatchAgainstCheckpointingOnceTheFramesAreHalved) {
    plan_.batch_size = 2;
    plan_.frames = 17;
    Plan nine = plan_;
    nine.frames = 9;
    Plan nine_one = nine;
    nine_one.batch_size = 1;
    nine_one.gradient_accumulation = 2;
    Plan nine_gc = nine;
    nine_gc.gradient_checkpointing = true;
    FakeTarget target;
    target.by_plan[describe(nine_one)] = Measurement{true, 70 * kMiB, 0.30};
    target.by_plan[describe(nine_gc)] = Measurement{true, 60 * kMiB, 0.25};
    GuardOptions options;
    options.measure = true;
    options.context.video = true;
    options.context.job_frames = 17;
    options.context.low_vram_levels = 3;
    EXPECT_EQ(run_step(target, options), nine_gc);
    std::vector<std::string> rules;
    for (const auto& c : events("change")) rules.push_back(c["rule"]);
    EXPECT_EQ(rules,
              (std::vector<std::string>{"train.fewer_frames", "train.gradient_checkpointing"}));
    EXPECT_EQ(target.measured.front(), describe(nine));  // the guide's plan first
}

// Climbing low_vram levels is bounded: once a plan at the job's micro-batch is the best so far at
// level L, only level L+1 at that micro-batch is measured above it.
TEST_F(MeasuredChoiceTest, HigherLevelsAreMeasuredOneStepPastAPlanAtTheJobsBatch) {
    FakeTarget target;
    Plan one = plan_;  // checkpointing off, batch 4, level 1
    one.low_vram = 1;
    target.by_plan[describe(with_checkpointing())] = Measurement{true, 60 * kMiB, 0.20};
    target.by_plan[describe(one)] = Measurement{true, 50 * kMiB, 0.10};
    GuardOptions options;
    options.measure = true;
    options.context.low_vram_levels = 3;
    EXPECT_EQ(run_step(target, options), one);
    for (const std::string& m : target.measured) {
        EXPECT_EQ(m.find("low_vram 3"), std::string::npos) << m;  // two past level 1: never
        if (m.find("low_vram 2") != std::string::npos) {
            EXPECT_NE(m.find("batch 4 x 1"), std::string::npos) << m;  // only the job's batch
        }
    }
    // Level 0: all five; level 1: all six once its batch-4 plan is the best; level 2:
    // checkpointing off and on at batch 4.
    EXPECT_EQ(target.measured.size(), 5u + 6u + 2u);
}

// The whole ladder against the model: from the job's plan, each activation size ends on a plan
// that runs, and no plan it could reach (any level from 1, where the free rung puts it) that fits
// with the headroom is more than 10% faster (the tie rule).
TEST_F(MeasuredChoiceTest, TheLadderEndsOnTheFastestPlanThatFitsForEveryActivationSize) {
    for (const double activation : {5.0, 10.0, 14.0, 20.0, 30.0, 45.0, 80.0, 150.0, 250.0}) {
        SCOPED_TRACE("activation MiB per item: " + std::to_string(activation));
        fs::remove(events_file_);
        ModelTarget target(activation);
        EventLog events(events_file_);
        GuardOptions options;
        options.measure = true;
        options.context.low_vram_levels = 3;
        options.context.encoders_idle = true;
        Guard guard(*device_, plan_, options, events);
        guard.set_target(&target);
        guard.run(Phase::kTrainStep, 1, [&] {
            if (!target.runs(guard.plan())) {
                throw c10::OutOfMemoryError("sim out of memory. Tried to allocate 2.00 MiB");
            }
        });
        const Plan end = guard.plan();
        ASSERT_TRUE(target.runs(end)) << describe(end);
        EXPECT_EQ(end.effective_batch(), 4);
        double best = 1e9;
        Plan best_plan;
        for (const bool gc : {false, true}) {
            for (const int batch : {4, 2, 1}) {
                for (int level = 0; level <= 3; ++level) {
                    // Without an OOM the job's plan stays; after one, the free rung moved to
                    // level 1 first and every level from there was open to measurement.
                    const bool same_level = end == plan_ ? level == 0 : level >= 1;
                    Plan p = plan_;
                    p.gradient_checkpointing = gc;
                    p.batch_size = batch;
                    p.gradient_accumulation = 4 / batch;
                    p.low_vram = level;
                    if (!same_level || target.peak(p) > 95 * kMiB) continue;
                    if (target.seconds(p) < best) {
                        best = target.seconds(p);
                        best_plan = p;
                    }
                }
            }
        }
        if (best < 1e9) {
            EXPECT_LE(target.seconds(end), best / 0.90 + 1e-12)
                << describe(end) << " against " << describe(best_plan);
        }
    }
}

}  // namespace
}  // namespace loom::guard