// Every rule of the ladder policy (DESIGN.md "Recovery specification"), one test each, plus
// whole-ladder walks: each decision changes one knob, never repeats a failed plan, and ends. The
// free rungs and the measured candidates are in test_ladder_free_rungs.cpp, the rung table in
// test_rung_table.cpp.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ladder_cases.h"
#include "loom/core/byte_size.h"
#include "loom/guard/ladder_policy.h"

namespace loom::guard {
namespace {

TEST(LadderPolicy, TrainingOomTurnsOnGradientCheckpointingFirst) {
    const Decision d = decide(image_plan(), train_oom(), {}, image_context());
    ASSERT_EQ(d.action, Decision::Action::kRetry);
    EXPECT_EQ(d.rule, "train.gradient_checkpointing");
    EXPECT_TRUE(d.plan.gradient_checkpointing);
    ASSERT_EQ(d.changes.size(), 1u);
    EXPECT_EQ(d.changes[0].knob, "train.gradient_checkpointing");
    EXPECT_EQ(d.changes[0].from, "false");
    EXPECT_EQ(d.changes[0].to, "true");
}

TEST(LadderPolicy, ThenBatchOneWithAccumulationKeepingTheEffectiveBatch) {
    Plan p = image_plan();
    p.gradient_checkpointing = true;
    p.gradient_accumulation = 2;  // effective 8
    const Decision d = decide(p, train_oom(), {}, image_context());
    ASSERT_EQ(d.action, Decision::Action::kRetry);
    EXPECT_EQ(d.rule, "train.batch_1_accumulate");
    EXPECT_EQ(d.plan.batch_size, 1);
    EXPECT_EQ(d.plan.gradient_accumulation, 8);
    EXPECT_EQ(d.plan.effective_batch(), p.effective_batch());
    EXPECT_EQ(d.changes.size(), 2u);  // one rung: batch and accumulation move together
}

TEST(LadderPolicy, ThenDropsTheLargestBucketAndRepeatsWhileMoreThanOneRemains) {
    Plan p = image_plan();
    p.gradient_checkpointing = true;
    p.batch_size = 1;
    p.gradient_accumulation = 4;
    OomEvent e = train_oom();
    e.bucket.reset();  // not attributed to a bucket: the plain order applies
    Decision d = decide(p, e, {}, image_context());
    ASSERT_EQ(d.action, Decision::Action::kRetry);
    EXPECT_EQ(d.rule, "train.drop_largest_bucket");
    EXPECT_EQ(d.plan.max_bucket_pixels, 512 * 768);
    // Repeatable: next time the data layer reports the next cap down.
    e.buckets.active = 2;
    e.buckets.largest_area = 512 * 768;
    e.buckets.next_cap = 512 * 512;
    d = decide(d.plan, e, {}, image_context());
    EXPECT_EQ(d.rule, "train.drop_largest_bucket");
    EXPECT_EQ(d.plan.max_bucket_pixels, 512 * 512);
    // One bucket left: nothing to drop.
    e.buckets.active = 1;
    e.buckets.next_cap.reset();
    d = decide(d.plan, e, after_steps(5), image_context());
    EXPECT_NE(d.rule, "train.drop_largest_bucket");
}

TEST(LadderPolicy, SometimesRuleDropsTheLargestBucketFirst) {
    // Gradient checkpointing is still off, but the failing batch came from the largest bucket
    // and smaller buckets have trained fine: the bucket goes first.
    History h;
    h.steps_succeeded = 12;
    h.trained_bucket_areas = {512 * 512, 512 * 768};
    const Decision d = decide(image_plan(), train_oom(13), h, image_context());
    ASSERT_EQ(d.action, Decision::Action::kRetry);
    EXPECT_EQ(d.rule, "train.sometimes_largest_bucket");
    EXPECT_EQ(d.plan.max_bucket_pixels, 512 * 768);
    EXPECT_FALSE(d.plan.gradient_checkpointing);
}

TEST(LadderPolicy, SometimesRuleNeedsSmallerBucketsToHaveTrained) {
    History h;
    h.steps_succeeded = 3;
    h.trained_bucket_areas = {768 * 768};  // only the largest trained so far
    EXPECT_EQ(decide(image_plan(), train_oom(), h, image_context()).rule,
              "train.gradient_checkpointing");
    // A failing batch from a smaller bucket is not the "sometimes" case either.
    h.trained_bucket_areas = {512 * 512};
    OomEvent e = train_oom();
    e.bucket = std::make_pair(512, 768);
    EXPECT_EQ(decide(image_plan(), e, h, image_context()).rule, "train.gradient_checkpointing");
}

TEST(LadderPolicy, SamplingRungInTrainingOnlyAfterASamplingPass) {
    Plan p = conservative_plan();
    OomEvent e = single_bucket_oom();
    History h;
    h.steps_succeeded = 20;
    PolicyContext c = image_context();
    c.low_vram_levels = 2;
    EXPECT_EQ(decide(p, e, h, c).rule, "train.low_vram");
    e.after_sample = true;
    const Decision d = decide(p, e, h, c);
    EXPECT_EQ(d.rule, "sample.one_prompt_at_a_time");
    EXPECT_FALSE(d.plan.sample.batch_prompts);
    expect_training_untouched(p, d.plan);
}

TEST(LadderPolicy, LowVramIsTheLastTrainingRungWhenAvailable) {
    Plan p = conservative_plan();
    OomEvent e = single_bucket_oom();
    PolicyContext c = image_context();
    c.low_vram_levels = 3;
    Decision d = decide(p, e, after_steps(1), c);
    EXPECT_EQ(d.rule, "train.low_vram");
    EXPECT_EQ(d.plan.low_vram, 1);
    p.low_vram = 3;
    d = decide(p, e, after_steps(1), c);
    EXPECT_EQ(d.action, Decision::Action::kDoesNotFit);
}

TEST(LadderPolicy, ExhaustedLadderSaysDoesNotFitWithTheSmallestPlanAndLowVramUnavailable) {
    Plan p = conservative_plan();
    OomEvent e = single_bucket_oom();
    const Decision d = decide(p, e, after_steps(0), image_context());
    ASSERT_EQ(d.action, Decision::Action::kDoesNotFit);
    EXPECT_EQ(d.plan, p);
    EXPECT_NE(d.reason.find("smallest plan tried"), std::string::npos) << d.reason;
    EXPECT_NE(d.reason.find("batch 1 x 4"), std::string::npos) << d.reason;
    EXPECT_NE(d.reason.find("low_vram, the last rung, is not available"), std::string::npos);
}

TEST(LadderPolicy, ConservativePlanFailingBeforeAnyStepWithForeignMemoryIsWorkerState) {
    Plan p = conservative_plan();
    OomEvent e = single_bucket_oom();
    e.memory.allocated = e.memory.reserved = 40 * kMiB;
    e.memory.free = 10 * kMiB;  // 46 MiB held outside loom: > 1/4 of the total
    Decision d = decide(p, e, {}, image_context());
    EXPECT_EQ(d.action, Decision::Action::kWorkerState);
    EXPECT_NE(d.reason.find("fresh worker"), std::string::npos);
    // Once a step succeeded, the same exhaustion is "does not fit".
    d = decide(p, e, after_steps(3), image_context());
    EXPECT_EQ(d.action, Decision::Action::kDoesNotFit);
}

TEST(LadderPolicy, LibraryAllocationFailureOnTheConservativePlanIsWorkerState) {
    Plan p = conservative_plan();
    OomEvent e = single_bucket_oom();
    e.kind = OomKind::kLibrary;
    EXPECT_EQ(decide(p, e, {}, image_context()).action, Decision::Action::kWorkerState);
    // On a plan that still has rungs, a library OOM walks the ladder like any device OOM.
    EXPECT_EQ(decide(image_plan(), e, {}, image_context()).rule, "train.gradient_checkpointing");
}

TEST(LadderPolicy, AlmostNothingFreeWhileLoomHoldsLittleIsWorkerStateAtOnce) {
    OomEvent e = train_oom();
    e.memory.allocated = e.memory.reserved = 4 * kMiB;
    e.memory.free = 0;
    const Decision d = decide(image_plan(), e, {}, image_context());
    EXPECT_EQ(d.action, Decision::Action::kWorkerState);
    EXPECT_EQ(d.rule, "worker_state.memory_held_elsewhere");
}

TEST(LadderPolicy, HostMemoryHasItsOwnLadderAndNeverTouchesDeviceKnobs) {
    OomEvent e = train_oom();
    e.kind = OomKind::kHost;
    PolicyContext c = image_context();
    c.host_threads = 4;
    Plan p = image_plan();
    Decision d = decide(p, e, {}, c);
    ASSERT_EQ(d.action, Decision::Action::kRetry);
    EXPECT_EQ(d.rule, "host.caches_to_disk");
    EXPECT_FALSE(d.plan.host.memory_caches);
    ASSERT_EQ(d.changes.size(), 1u);
    EXPECT_EQ(d.changes[0].knob, "host.memory_caches");
    d = decide(d.plan, e, {}, c);
    EXPECT_EQ(d.rule, "host.fewer_threads");
    EXPECT_EQ(d.plan.host.threads, 2);
    d = decide(d.plan, e, {}, c);
    EXPECT_EQ(d.plan.host.threads, 1);
    d = decide(d.plan, e, {}, c);
    EXPECT_EQ(d.action, Decision::Action::kHostMemory);
    // Device knobs are never touched on the way.
    expect_training_untouched(p, d.plan);
    EXPECT_EQ(d.plan.sample, p.sample);
}

TEST(LadderPolicy, ADeathBySigkillStepsDownTheHostLadder) {
    PolicyContext c = image_context();
    const Decision d = decide_after_death(image_plan(), c);
    EXPECT_EQ(d.action, Decision::Action::kRetry);
    EXPECT_EQ(d.rule, "host.caches_to_disk");
    expect_training_untouched(image_plan(), d.plan);
}

TEST(LadderPolicy, SamplingOomChangesOnlySamplingInTheDocumentedOrder) {
    Plan p = image_plan();
    const PolicyContext c = image_context();
    const std::vector<std::string> expected = {
        "sample.one_prompt_at_a_time", "sample.sequential_guidance", "sample.halve_size",
        "sample.disable"};  // 512 → 256, the floor: then disable
    History h;
    for (const std::string& rule : expected) {
        h.failed.emplace_back(Work::kSample, p);
        const Decision d = decide(p, sample_oom(), h, c);
        ASSERT_EQ(d.action, Decision::Action::kRetry) << rule;
        EXPECT_EQ(d.rule, rule);
        expect_training_untouched(image_plan(), d.plan);
        p = d.plan;
    }
    EXPECT_FALSE(p.sample.enabled);
    EXPECT_EQ(p.sample.width, 256);
    EXPECT_EQ(p.sample.height, 256);
}

TEST(LadderPolicy, SamplingSkipsRungsThatCannotHelp) {
    PolicyContext c;
    c.prompt_count = 1;  // nothing to unbatch
    c.guidance = false;  // guidance scale 1: a single pass
    const Decision d = decide(image_plan(), sample_oom(), {}, c);
    EXPECT_EQ(d.rule, "sample.halve_size");
    EXPECT_EQ(d.plan.sample.width, 256);
}

TEST(LadderPolicy, SamplingFloorIsTheSmallestTrainingBucketWhenBelow256) {
    Plan p = image_plan();
    p.sample.width = p.sample.height = 256;
    p.sample.batch_prompts = p.sample.batch_guidance = false;
    OomEvent e = sample_oom();
    e.buckets.smallest_side = 64;
    Decision d = decide(p, e, {}, image_context());
    EXPECT_EQ(d.rule, "sample.halve_size");
    EXPECT_EQ(d.plan.sample.width, 128);
    d = decide(d.plan, e, {}, image_context());
    EXPECT_EQ(d.plan.sample.width, 64);
    d = decide(d.plan, e, {}, image_context());
    EXPECT_EQ(d.rule, "sample.disable");
}

TEST(LadderPolicy, VideoSamplingHalvesFramesBeforeDisabling) {
    Plan p = image_plan();
    p.sample.batch_prompts = p.sample.batch_guidance = false;
    p.sample.width = p.sample.height = 256;
    p.sample.frames = 41;
    PolicyContext c = image_context();
    c.video = true;
    const Decision d = decide(p, sample_oom(), {}, c);
    EXPECT_EQ(d.rule, "sample.fewer_frames");
    EXPECT_EQ(d.plan.sample.frames, 21);
}

TEST(LadderPolicy, VideoTrainingOrderIsFramesBatchCheckpointingBucket) {
    Plan p = image_plan();
    p.frames = 33;
    PolicyContext c = image_context();
    c.video = true;
    c.job_frames = 33;
    std::vector<std::string> rules;
    OomEvent e = train_oom();
    e.bucket.reset();
    History h;
    e.buckets.active = 2;
    for (int i = 0; i < 8; ++i) {
        h.failed.emplace_back(Work::kTrain, p);
        const Decision d = decide(p, e, h, c);
        if (d.action != Decision::Action::kRetry) break;
        rules.push_back(d.rule);
        if (d.rule == "train.drop_largest_bucket") {
            e.buckets.active = 1;
            e.buckets.next_cap.reset();
        }
        p = d.plan;
    }
    const std::vector<std::string> expected = {
        "train.fewer_frames",        // 33 → 17, once
        "train.batch_1_accumulate",  // then batch 1
        "train.gradient_checkpointing",
        "train.drop_largest_bucket",  // the resolution
        "train.fewer_frames",         // then frames again, down to one: 17 → 9 → 5 → 1
        "train.fewer_frames",           "train.fewer_frames"};
    EXPECT_EQ(rules, expected);
    EXPECT_EQ(p.frames, 1);
    EXPECT_EQ(p.batch_size, 1);
    EXPECT_EQ(p.gradient_accumulation, 4);
}

// auto_frame_count: every clip may be shorter than the cap (81); the rung halves what the clips
// have (the longest active one), never a cap that changes nothing.
TEST(LadderPolicy, FramesHalveTheLongestClipWhenShorterThanTheCap) {
    Plan p = image_plan();
    p.frames = 81;
    PolicyContext c = image_context();
    c.video = true;
    c.job_frames = 81;
    OomEvent e = train_oom();
    e.buckets.longest_clip = 21;
    Decision d = decide(p, e, {}, c);
    EXPECT_EQ(d.rule, "train.fewer_frames");
    EXPECT_EQ(d.plan.frames, 9);
    // Batch, checkpointing and buckets spent: frames again, from the longest clip (9 -> 5)...
    p = conservative_plan();
    p.frames = 41;
    e = single_bucket_oom();
    e.buckets.longest_clip = 9;
    d = decide(p, e, {}, c);
    EXPECT_EQ(d.rule, "train.fewer_frames");
    EXPECT_EQ(d.plan.frames, 5);
    // ...and with every clip at one frame (images left) nothing for the rung to halve.
    e.buckets.longest_clip = 1;
    d = decide(p, e, {}, c);
    EXPECT_NE(d.rule, "train.fewer_frames");
    EXPECT_EQ(d.plan.frames, 41);
}

TEST(LadderPolicy, FramesKeepTheFourKPlusOneForm) {
    EXPECT_EQ(halve_frames(81), 41);
    EXPECT_EQ(halve_frames(41), 21);
    EXPECT_EQ(halve_frames(21), 9);
    EXPECT_EQ(halve_frames(9), 5);
    EXPECT_EQ(halve_frames(5), 1);
    EXPECT_EQ(halve_frames(1), 1);
    for (int f = 1; f <= 129; f += 4) EXPECT_EQ((halve_frames(f) - 1) % 4, 0) << f;
}

TEST(LadderPolicy, SampleSidesHalveToMultiplesOf64AboveTheFloor) {
    EXPECT_EQ(halve_sample_side(1024, 256), 512);
    EXPECT_EQ(halve_sample_side(768, 256), 384);
    EXPECT_EQ(halve_sample_side(640, 256), 320);
    EXPECT_EQ(halve_sample_side(300, 256), 256);
    EXPECT_EQ(halve_sample_side(256, 256), 256);  // cannot shrink
    EXPECT_EQ(sample_floor(512), 256);
    EXPECT_EQ(sample_floor(64), 64);
    EXPECT_EQ(sample_floor(50), 48);
    EXPECT_EQ(sample_floor(3), 8);
}

TEST(LadderPolicy, LoadAndCacheGoToLowVram) {
    PolicyContext c = image_context();
    c.low_vram_levels = 3;
    for (Work w : {Work::kLoad, Work::kCache}) {
        OomEvent e = train_oom();
        e.work = w;
        e.phase = w == Work::kLoad ? Phase::kLoad : Phase::kCache;
        e.step.reset();
        const Decision d = decide(image_plan(), e, {}, c);
        ASSERT_EQ(d.action, Decision::Action::kRetry);
        EXPECT_EQ(d.rule, "load.low_vram");
        EXPECT_EQ(d.plan.low_vram, 1);
        EXPECT_EQ(d.plan.batch_size, 4);  // batch and buckets do not exist yet
        EXPECT_FALSE(d.plan.gradient_checkpointing);
    }
}

TEST(LadderPolicy, LoadOomWithoutLowVramDoesNotFit) {
    OomEvent e = train_oom();
    e.work = Work::kLoad;
    e.phase = Phase::kLoad;
    e.step.reset();
    e.memory.allocated = e.memory.reserved = 90 * kMiB;
    e.memory.free = 6 * kMiB;
    const Decision d = decide(image_plan(), e, {}, image_context());
    EXPECT_EQ(d.action, Decision::Action::kDoesNotFit);
    EXPECT_NE(d.reason.find("low_vram, the last rung, is not available"), std::string::npos);
}

TEST(LadderPolicy, SaveIsRetriedOnceAsItWasThenLowVram) {
    OomEvent e = train_oom();
    e.work = Work::kSave;
    e.phase = Phase::kSave;
    PolicyContext c = image_context();
    c.low_vram_levels = 1;
    Decision d = decide(image_plan(), e, {}, c);
    EXPECT_EQ(d.action, Decision::Action::kRetry);
    EXPECT_EQ(d.rule, "save.free_and_retry");
    EXPECT_EQ(d.plan, image_plan());
    EXPECT_TRUE(d.changes.empty());
    History h;
    h.save_retries = 1;
    d = decide(image_plan(), e, h, c);
    EXPECT_EQ(d.rule, "save.low_vram");
}

TEST(LadderPolicy, NeverTheSameRetryTwice) {
    // The plan gradient checkpointing would give has failed before: the next rung is chosen.
    Plan with_gc = image_plan();
    with_gc.gradient_checkpointing = true;
    History h;
    h.failed.emplace_back(Work::kTrain, with_gc);
    const Decision d = decide(image_plan(), train_oom(), h, image_context());
    EXPECT_EQ(d.rule, "train.batch_1_accumulate");
    // Failures at another kind of work do not count.
    History other;
    other.failed.emplace_back(Work::kSample, with_gc);
    EXPECT_EQ(decide(image_plan(), train_oom(), other, image_context()).rule,
              "train.gradient_checkpointing");
}

TEST(LadderPolicy, AWholeTrainingWalkChangesOneRungAtATimeAndEnds) {
    Plan p = image_plan();
    p.sample.enabled = true;
    PolicyContext c = image_context();
    c.low_vram_levels = 2;
    OomEvent e = train_oom();
    e.bucket.reset();
    e.after_sample = true;
    History h;
    h.steps_succeeded = 1;
    int rungs = 0;
    for (;;) {
        h.failed.emplace_back(Work::kTrain, p);
        const Decision d = decide(p, e, h, c);
        if (d.action != Decision::Action::kRetry) {
            EXPECT_EQ(d.action, Decision::Action::kDoesNotFit);
            break;
        }
        ASSERT_FALSE(d.changes.empty());
        // One rung: a single knob, or batch with its accumulation.
        if (d.rule == "train.batch_1_accumulate") {
            ASSERT_EQ(d.changes.size(), 2u);
            EXPECT_EQ(d.changes[0].knob, "train.batch_size");
            EXPECT_EQ(d.changes[1].knob, "train.gradient_accumulation");
        } else if (d.rule == "sample.halve_size") {
            ASSERT_EQ(d.changes.size(), 2u);  // width and height: one size
            EXPECT_EQ(d.changes[0].knob, "sample.width");
        } else {
            EXPECT_EQ(d.changes.size(), 1u) << d.rule;
        }
        EXPECT_EQ(d.plan.effective_batch(), image_plan().effective_batch());
        if (d.rule == "train.drop_largest_bucket") {
            e.buckets.largest_area = *d.plan.max_bucket_pixels;
            e.buckets.next_cap =
                e.buckets.active > 2 ? std::optional<std::int64_t>(512 * 512) : std::nullopt;
            e.buckets.active -= 1;
        }
        p = d.plan;
        ASSERT_LT(++rungs, 20);
    }
    EXPECT_TRUE(p.gradient_checkpointing);
    EXPECT_EQ(p.batch_size, 1);
    EXPECT_FALSE(p.sample.enabled);
    EXPECT_EQ(p.low_vram, 2);
    EXPECT_EQ(p.max_bucket_pixels, 512 * 512);
}

TEST(LadderPolicy, DirtyDeviceAndForeignBytes) {
    MemoryStats m;
    m.total = 100;
    m.free = 4;
    EXPECT_TRUE(device_looks_dirty(m));
    m.free = 6;
    EXPECT_FALSE(device_looks_dirty(m));
    m.total = 0;
    EXPECT_FALSE(device_looks_dirty(m));
    MemoryStats f;
    f.total = 100;
    f.free = 30;
    f.reserved = 20;
    EXPECT_EQ(foreign_bytes(f), 50u);
    f.free = 90;
    EXPECT_EQ(foreign_bytes(f), 0u);
}

}  // namespace
}  // namespace loom::guard
