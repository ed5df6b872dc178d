// Starting from the store's stable plan: the memory order of plans, the per-knob lighter plan,
// and when a job reuses a stable plan (DESIGN.md "Stability and reuse").

#include <gtest/gtest.h>

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
