// The ladder's free rung (idle encoders off the device) and the measured candidates: which
// training rungs cost time, are measured against each other, and can be taken back.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ladder_cases.h"
#include "loom/core/byte_size.h"
#include "loom/guard/ladder_policy.h"

namespace loom::guard {
namespace {

// Issue 22: with every encoding cached, the idle encoders leave the device before any rung that
// slows training; without that, or with low_vram already on, the free rung does not apply.
TEST(LadderPolicy, IdleEncodersLeaveTheDeviceBeforeAnyCostlyRung) {
    PolicyContext c = image_context();
    c.low_vram_levels = 3;
    c.encoders_idle = true;
    const Decision d = decide(image_plan(), train_oom(), after_steps(3), c);
    EXPECT_EQ(d.rule, "free.encoders_off_device");
    EXPECT_EQ(d.plan.low_vram, 1);
    ASSERT_EQ(d.changes.size(), 1u);
    EXPECT_EQ(d.changes[0].knob, "model.low_vram");
    EXPECT_TRUE(find_rung(d.rule)->free);
    // Next OOM: the costly rungs in the guide's order.
    History h = after_steps(3);
    h.failed.emplace_back(Work::kTrain, image_plan());
    EXPECT_EQ(decide(d.plan, train_oom(), h, c).rule, "train.gradient_checkpointing");
    c.encoders_idle = false;
    EXPECT_EQ(decide(image_plan(), train_oom(), after_steps(3), c).rule,
              "train.gradient_checkpointing");
    c.encoders_idle = true;
    c.low_vram_levels = 0;  // no low_vram in this build: nothing to move them with
    EXPECT_EQ(decide(image_plan(), train_oom(), after_steps(3), c).rule,
              "train.gradient_checkpointing");
}

// Issue 39: a denoiser of experts computes a step with one of them, so the idle one leaves the
// device first — before the idle encoders, in the image and the video branch — and once; a model
// of one denoiser never has the rung.
TEST(LadderPolicy, TheIdleExpertLeavesTheDeviceFirst) {
    PolicyContext c = image_context();
    c.low_vram_levels = 3;
    c.encoders_idle = true;
    c.experts = 2;
    for (const bool video : {false, true}) {
        c.video = video;
        const Decision d = decide(image_plan(), train_oom(), after_steps(3), c);
        EXPECT_EQ(d.rule, "free.idle_expert_to_host") << video;
        EXPECT_TRUE(d.plan.idle_expert_on_host);
        ASSERT_EQ(d.changes.size(), 1u);
        EXPECT_EQ(d.changes[0].knob, "model.idle_expert_on_host");
        EXPECT_TRUE(find_rung(d.rule)->free);
        History h = after_steps(3);
        h.failed.emplace_back(Work::kTrain, image_plan());
        EXPECT_EQ(decide(d.plan, train_oom(), h, c).rule, "free.encoders_off_device") << video;
    }
    c.video = false;
    c.experts = 1;
    EXPECT_EQ(decide(image_plan(), train_oom(), after_steps(3), c).rule,
              "free.encoders_off_device");
    // Not a sampling rung: a preview brings the expert of its timesteps to the device anyway.
    c.experts = 2;
    EXPECT_NE(decide(image_plan(), sample_oom(), after_steps(3), c).rule,
              "free.idle_expert_to_host");
}

// What a measured choice picks from: checkpointing and batch 1 (both keep what is trained),
// in the guide's order; nothing when the first rung is free, changes buckets or is the last.
// The measured choice's candidates (issue 22): low_vram (the plan's level and up) x checkpointing
// x micro-batch (dividing the effective batch, up to the job's), lower levels first; never a plan
// that needs at least what a failed one needed.
TEST(LadderPolicy, MeasuredCandidatesVaryOnlyHowAStepIsComputed) {
    PolicyContext c = image_context();
    c.low_vram_levels = 3;
    const Plan job = image_plan();  // batch 4, checkpointing off, low_vram 0
    History h = after_steps(3);
    h.failed.emplace_back(Work::kTrain, job);
    std::vector<Plan> candidates = measured_candidates(job, job, h, c);
    // 4 levels x checkpointing off/on x batch 4, 2, 1 = 24, less the failed plan itself.
    ASSERT_EQ(candidates.size(), 23u);
    for (const Plan& p : candidates) {
        EXPECT_EQ(p.effective_batch(), 4);
        EXPECT_NE(p, job);
    }
    EXPECT_EQ(candidates[0].low_vram, 0);  // lower levels first, then the job's checkpointing,
    EXPECT_FALSE(candidates[0].gradient_checkpointing);  // then the larger micro-batch
    EXPECT_EQ(candidates[0].batch_size, 2);
    EXPECT_EQ(candidates.back().low_vram, 3);
    // From level 2: levels 2 and 3 only (never below the plan's).
    Plan two = job;
    two.low_vram = 2;
    candidates = measured_candidates(two, job, after_steps(3), c);
    EXPECT_EQ(candidates.size(), 12u);
    for (const Plan& p : candidates) EXPECT_GE(p.low_vram, 2);
    // Without low_vram (levels 0): checkpointing x batch at the plan's level.
    PolicyContext none = image_context();
    EXPECT_EQ(measured_candidates(job, job, after_steps(3), none).size(), 6u);
    // A failed plan rules out everything that needs at least as much: checkpointing on at batch
    // 2 at level 0 failed, so at level 0 only batch 1 is left; the higher levels all stay.
    Plan failed = job;
    failed.gradient_checkpointing = true;
    failed.batch_size = 2;
    failed.gradient_accumulation = 2;
    h = after_steps(3);
    h.failed.emplace_back(Work::kTrain, failed);
    candidates = measured_candidates(job, job, h, c);
    ASSERT_EQ(candidates.size(), 2u + 18u);
    for (const Plan& p : candidates) {
        if (p.low_vram == 0) EXPECT_EQ(p.batch_size, 1);
    }
    // A failed sampling pass says nothing about training.
    h = after_steps(3);
    h.failed.emplace_back(Work::kSample, job);
    EXPECT_EQ(measured_candidates(job, job, h, c).size(), 24u);
}

TEST(LadderPolicy, OnlyTrainingRungsThatCostTimeAreMeasuredAndOnlySomeAreReversible) {
    EXPECT_TRUE(measured_rung("train.gradient_checkpointing"));
    EXPECT_TRUE(measured_rung("train.batch_1_accumulate"));
    EXPECT_TRUE(measured_rung("train.drop_largest_bucket"));
    EXPECT_TRUE(measured_rung("train.low_vram"));
    EXPECT_FALSE(measured_rung("free.encoders_off_device"));
    EXPECT_FALSE(measured_rung("load.low_vram"));
    EXPECT_FALSE(measured_rung("sample.halve_size"));
    EXPECT_FALSE(measured_rung("no.such.rule"));
    const Plan p = image_plan();
    Plan q = p;
    q.gradient_checkpointing = true;
    q.batch_size = 1;
    q.gradient_accumulation = 4;
    EXPECT_TRUE(reversible_change(p, q));
    Plan streamed = q;
    streamed.low_vram = 2;
    Plan three = streamed;
    three.low_vram = 3;
    EXPECT_TRUE(reversible_change(streamed, three));
    EXPECT_TRUE(reversible_change(three, streamed));
    EXPECT_TRUE(reversible_change(q, streamed));  // a measurement keeps the float32 weights
    Plan bucket = p;
    bucket.max_bucket_pixels = 512 * 512;
    EXPECT_FALSE(reversible_change(p, bucket));
}

}  // namespace
}  // namespace loom::guard
