// Starting from the store's stable plan: the memory order of plans, the per-knob lighter plan,
// and when a job reuses a stable plan (DESIGN.md "Stability and reuse").

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "loom/guard/plan_reuse.h"

namespace loom::guard {
namespace {

Plan job_plan() {  // batch 4, no checkpointing, previews 512x512 batched
    Plan p;
    p.batch_size = 4;
    p.gradient_accumulation = 1;
    p.sample.width = 512;
    p.sample.height = 512;
    return p;
}

Plan downgraded() {  // what the ladder reaches from job_plan(): checkpointing, batch 1 x 4
    Plan p = job_plan();
    p.gradient_checkpointing = true;
    p.batch_size = 1;
    p.gradient_accumulation = 4;
    return p;
}

KnownPlans known(std::vector<Plan> failed, const Plan& stable) {
    KnownPlans k;
    k.failed = std::move(failed);
    k.stable = StoredStable{7, stable, "first_run", "2026-11-30T08:00:00.000Z"};
    return k;
}

TEST(PlanReuse, NoHeavierComparesEveryDeviceKnob) {
    const Plan a = job_plan();
    EXPECT_TRUE(no_heavier(a, a));
    EXPECT_TRUE(no_heavier(downgraded(), a));
    EXPECT_FALSE(no_heavier(a, downgraded()));

    Plan capped = a;
    capped.max_bucket_pixels = 256 * 256;
    EXPECT_TRUE(no_heavier(capped, a));  // no cap is the heaviest
    EXPECT_FALSE(no_heavier(a, capped));

    Plan low = a;
    low.low_vram = 2;
    EXPECT_TRUE(no_heavier(low, a));
    EXPECT_FALSE(no_heavier(a, low));

    Plan no_samples = a;
    no_samples.sample.enabled = false;
    no_samples.sample.width = 4096;  // sizes of disabled sampling do not matter
    EXPECT_TRUE(no_heavier(no_samples, a));
    EXPECT_FALSE(no_heavier(a, no_samples));

    Plan one_prompt = a;
    one_prompt.sample.batch_prompts = false;
    EXPECT_TRUE(no_heavier(one_prompt, a));
    EXPECT_FALSE(no_heavier(a, one_prompt));

    // Accumulation and host knobs are not device memory.
    Plan host = a;
    host.gradient_accumulation = 8;
    host.host.memory_caches = false;
    host.host.threads = 1;
    EXPECT_TRUE(no_heavier(host, a));
    EXPECT_TRUE(no_heavier(a, host));

    // Heavier in one knob, lighter in another: incomparable.
    Plan mixed = a;
    mixed.gradient_checkpointing = true;
    mixed.batch_size = 8;
    EXPECT_FALSE(no_heavier(mixed, a));
    EXPECT_FALSE(no_heavier(a, mixed));
}

// The memory order, knob by knob, written out here rather than taken from Plan::fields: each
// knob's lighter value, and whether it is device memory (no_heavier counts only those).
struct LighterKnob {
    std::string knob;
    std::function<void(Plan&)> lighten;
    bool device;
};

const std::vector<LighterKnob>& lighter_knobs() {
    static const std::vector<LighterKnob> kKnobs = {
        {"train.gradient_checkpointing", [](Plan& p) { p.gradient_checkpointing = true; }, true},
        {"train.batch_size", [](Plan& p) { p.batch_size = 2; }, true},
        {"train.gradient_accumulation", [](Plan& p) { p.gradient_accumulation = 2; }, false},
        {"datasets.max_bucket_pixels", [](Plan& p) { p.max_bucket_pixels = 256 * 256; }, true},
        {"datasets.num_frames", [](Plan& p) { p.frames = 1; }, true},
        {"model.low_vram", [](Plan& p) { p.low_vram = 1; }, true},
        // Weighs at level 3 only (the base there streams 2 blocks, see below).
        {"model.streamed_blocks", [](Plan& p) { p.streamed_blocks = 4; }, true},
        {"model.idle_expert_on_host", [](Plan& p) { p.idle_expert_on_host = true; }, true},
        {"model.qtype", [](Plan& p) { p.qtype = config::QType::kUInt4; }, true},  // 4 bits, not 8
        {"model.qtype_te", [](Plan& p) { p.qtype_te = config::QType::kInt8; }, true},  // not bf16
        {"sample.enabled", [](Plan& p) { p.sample.enabled = false; }, true},
        {"sample.width", [](Plan& p) { p.sample.width = 256; }, true},
        {"sample.height", [](Plan& p) { p.sample.height = 256; }, true},
        {"sample.batch_prompts", [](Plan& p) { p.sample.batch_prompts = false; }, true},
        {"sample.batch_guidance", [](Plan& p) { p.sample.batch_guidance = false; }, true},
        {"sample.num_frames", [](Plan& p) { p.sample.frames = 1; }, true},
        {"host.memory_caches", [](Plan& p) { p.host.memory_caches = false; }, false},
        {"host.threads", [](Plan& p) { p.host.threads = 2; }, false},  // from 0: all cores
    };
    return kKnobs;
}

Plan heavy_plan() {  // job_plan() with frames to drop
    Plan p = job_plan();
    p.frames = 5;
    p.sample.frames = 5;
    return p;
}

TEST(PlanReuse, EveryKnobOfThePlanHasItsPlaceInTheMemoryOrder) {
    std::vector<std::string> listed;
    for_each_knob([&](const Knob& k, const auto&) { listed.push_back(k.name()); });
    std::vector<std::string> ordered;
    for (const LighterKnob& k : lighter_knobs()) ordered.push_back(k.knob);
    EXPECT_EQ(ordered, listed);  // a new knob needs its row here

    for (const LighterKnob& k : lighter_knobs()) {
        Plan base = heavy_plan();
        if (k.knob == "model.streamed_blocks") {
            base.low_vram = 3;
            base.streamed_blocks = 2;
        }
        Plan light = base;
        k.lighten(light);
        ASSERT_EQ(diff(base, light).size(), 1u) << k.knob;
        EXPECT_TRUE(no_heavier(light, base)) << k.knob;
        EXPECT_EQ(no_heavier(base, light), !k.device) << k.knob;
        // The lighter of the two is the lighter one, whichever asks; the effective batch is
        // always the requested plan's.
        EXPECT_EQ(lighter_of(light, base), light) << k.knob;
        Plan expected = light;
        if (k.knob == "train.batch_size") expected.gradient_accumulation = 2;  // 4 = 2 x 2
        if (k.knob == "train.gradient_accumulation") expected = base;
        EXPECT_EQ(lighter_of(base, light), expected) << k.knob;
    }
}

TEST(PlanReuse, ThreadsAreFewerWhenEitherPlanCapsThem) {
    Plan a = heavy_plan();
    Plan b = a;
    a.host.threads = 4;
    b.host.threads = 2;
    EXPECT_EQ(lighter_of(a, b).host.threads, 2);
    EXPECT_EQ(lighter_of(b, a).host.threads, 2);
    b.host.threads = 0;  // all cores
    EXPECT_EQ(lighter_of(a, b).host.threads, 4);
    EXPECT_EQ(lighter_of(b, a).host.threads, 4);
    a.host.threads = 0;
    EXPECT_EQ(lighter_of(a, b).host.threads, 0);
}

TEST(PlanReuse, LighterOfKeepsTheJobsEffectiveBatchAndItsOwnLighterChoices) {
    Plan requested = job_plan();
    requested.batch_size = 6;
    requested.gradient_accumulation = 1;
    requested.sample.height = 256;  // the job's own previews are already lower
    Plan stable = downgraded();
    stable.batch_size = 4;  // does not divide 6: batch 1
    stable.max_bucket_pixels = 512 * 512;
    stable.host.threads = 2;
    const Plan p = lighter_of(requested, stable);
    EXPECT_TRUE(p.gradient_checkpointing);
    EXPECT_EQ(p.batch_size, 1);
    EXPECT_EQ(p.gradient_accumulation, 6);
    EXPECT_EQ(p.max_bucket_pixels, 512 * 512);
    EXPECT_EQ(p.sample.height, 256);
    EXPECT_EQ(p.host.threads, 2);
    EXPECT_TRUE(no_heavier(p, requested));
    EXPECT_TRUE(no_heavier(p, stable));

    Plan two = downgraded();
    two.batch_size = 2;
    const Plan q = lighter_of(job_plan(), two);
    EXPECT_EQ(q.batch_size, 2);
    EXPECT_EQ(q.gradient_accumulation, 2);  // 4 = 2 x 2
}

TEST(PlanReuse, TheSameJobStartsFromTheStablePlanKnobByKnob) {
    // The first run failed on the job's plan and on checkpointing alone, then trained on
    // checkpointing + batch 1 x 4.
    Plan gc_only = job_plan();
    gc_only.gradient_checkpointing = true;
    const std::optional<Reuse> r =
        reuse_stable_plan(job_plan(), known({job_plan(), gc_only}, downgraded()));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->plan, downgraded());
    EXPECT_EQ(r->stable_id, 7);
    ASSERT_EQ(r->changes.size(), 3u);  // checkpointing, batch, accumulation
    EXPECT_EQ(r->changes[0].knob, "train.gradient_checkpointing");
    EXPECT_NE(r->reason.find("this plan ran out of memory"), std::string::npos) << r->reason;
    EXPECT_NE(r->reason.find("#7"), std::string::npos);
}

TEST(PlanReuse, AHeavierOrLighterFailureCountsAnIncomparableOneDoesNot) {
    // A plan at least as heavy as the job's failed (batch 8): the spec's rule.
    Plan heavier = job_plan();
    heavier.batch_size = 8;
    const std::optional<Reuse> from_heavier =
        reuse_stable_plan(job_plan(), known({heavier}, downgraded()));
    ASSERT_TRUE(from_heavier);
    EXPECT_NE(from_heavier->reason.find("at least as heavy"), std::string::npos);

    // A lighter plan failed: the job's heavier one needs at least as much.
    Plan lighter = job_plan();
    lighter.batch_size = 2;
    EXPECT_TRUE(reuse_stable_plan(job_plan(), known({lighter}, downgraded())));

    // Checkpointing on but batch 8: neither heavier nor lighter than the job's plan.
    Plan mixed = job_plan();
    mixed.gradient_checkpointing = true;
    mixed.batch_size = 8;
    EXPECT_FALSE(reuse_stable_plan(job_plan(), known({mixed}, downgraded())));
}

TEST(PlanReuse, NothingToReuseWithoutAFailureAStablePlanOrALighterOne) {
    EXPECT_FALSE(reuse_stable_plan(job_plan(), known({}, downgraded())));
    KnownPlans no_stable;
    no_stable.failed = {job_plan()};
    EXPECT_FALSE(reuse_stable_plan(job_plan(), no_stable));
    // The job already asks for the stable plan (or lighter): nothing changes.
    EXPECT_FALSE(reuse_stable_plan(downgraded(), known({job_plan()}, downgraded())));
}

}  // namespace
}  // namespace loom::guard
