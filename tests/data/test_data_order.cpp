// Data order: batches from one bucket, seeded epoch shuffles, and a cursor that restores the
// exact sequence.

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "loom/core/error.h"
#include "loom/data/data_order.h"

namespace loom::data {
namespace {

// 7 images in 3 aspect ratios (+ a small one), with flip_x: 14 items in 4 buckets.
const std::vector<ImageSize> kMixedAspectSizes = {
    {1024, 1024}, {800, 800}, {1920, 1080}, {1280, 720}, {1080, 1920}, {2000, 2000}, {300, 200}};

std::vector<DatasetItem> items() {
    return expand_items(kMixedAspectSizes.size(), {512}, 1, true, false);
}

BucketPlan plan() {
    return assign_buckets(items(), kMixedAspectSizes, 16);
}

std::vector<Batch> take(DataOrder& order, int n) {
    std::vector<Batch> out;
    for (int i = 0; i < n; ++i) out.push_back(order.next_batch());
    return out;
}

void expect_same(const std::vector<Batch>& a, const std::vector<Batch>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].bucket, b[i].bucket) << i;
        EXPECT_EQ(a[i].items, b[i].items) << i;
        EXPECT_EQ(a[i].epoch, b[i].epoch) << i;
        EXPECT_EQ(a[i].index, b[i].index) << i;
    }
}

TEST(DataOrder, EveryBatchComesFromOneBucketAndAnEpochCoversEveryItem) {
    const BucketPlan p = plan();
    ASSERT_EQ(p.buckets.size(), 4u);  // 288x208, 384x672, 672x384, 512x512
    DataOrder order(p, 3, 42);
    // 512x512: 6 items -> 2 batches; 672x384: 4 -> 2 (one padded); 384x672: 2 -> 1 (padded);
    // 288x208: 2 -> 1 (padded).
    EXPECT_EQ(order.batches_per_epoch(), 6u);
    std::multiset<std::size_t> seen;
    std::set<std::size_t> distinct;
    for (const Batch& b : take(order, 6)) {
        ASSERT_EQ(b.items.size(), 3u);
        EXPECT_EQ(b.epoch, 0u);
        std::set<std::size_t> own(b.items.begin(), b.items.end());
        for (std::size_t item : own) {
            EXPECT_EQ(p.item_bucket[item], b.bucket);
            seen.insert(item);
        }
        distinct.insert(own.begin(), own.end());
    }
    EXPECT_EQ(distinct.size(), 14u);  // every item
    EXPECT_EQ(seen.size(), 14u);      // and each in only one batch (padding repeats in-batch)
    EXPECT_EQ(order.next_batch().epoch, 1u);
    EXPECT_EQ(order.cursor().epoch, 1u);
    EXPECT_EQ(order.cursor().position, 1u);
}

TEST(DataOrder, ShortBatchesArePaddedWithTheirOwnItems) {
    DataOrder order(plan(), 4, 1);
    for (const Batch& b : order.epoch_batches(0)) {
        if (b.bucket.key() != "384x672") continue;  // items 4 and 11 (1080x1920 and its flip)
        std::multiset<std::size_t> counts(b.items.begin(), b.items.end());
        EXPECT_EQ(counts.count(4), 2u);
        EXPECT_EQ(counts.count(11), 2u);
        EXPECT_EQ(b.items[0], b.items[2]);
        EXPECT_EQ(b.items[1], b.items[3]);
    }
}

TEST(DataOrder, TheSameSeedGivesTheSameBatches) {
    DataOrder a(plan(), 2, 7), b(plan(), 2, 7), c(plan(), 2, 8);
    const std::vector<Batch> sa = take(a, 40), sb = take(b, 40), sc = take(c, 40);
    expect_same(sa, sb);
    bool differs = false;
    for (std::size_t i = 0; i < sa.size(); ++i) differs |= sa[i].items != sc[i].items;
    EXPECT_TRUE(differs);
    // Epochs are shuffled anew.
    const std::vector<Batch> e0 = a.epoch_batches(0), e1 = a.epoch_batches(1);
    bool epoch_differs = false;
    for (std::size_t i = 0; i < e0.size(); ++i) epoch_differs |= e0[i].items != e1[i].items;
    EXPECT_TRUE(epoch_differs);
}

TEST(DataCursor, SavedAndRestoredGivesTheIdenticalSequence) {
    DataOrder original(plan(), 3, 42);
    take(original, 5);  // into epoch 0
    const std::string saved = cursor_to_json(original.cursor());
    EXPECT_EQ(saved, "{\"epoch\":0,\"fingerprint\":\"" + original.cursor().fingerprint +
                         "\",\"position\":5,\"seed\":42}");
    const std::vector<Batch> expected = take(original, 40);  // crosses several epochs

    DataOrder resumed(plan(), 3, 42);
    EXPECT_TRUE(resumed.restore(cursor_from_json(saved)));
    EXPECT_EQ(resumed.cursor(), cursor_from_json(saved));
    expect_same(take(resumed, 40), expected);
}

TEST(DataCursor, RestoreIntoADifferentPlanRestartsTheEpoch) {
    DataOrder original(plan(), 3, 42);
    take(original, 8);  // epoch 1, position 2
    const DataCursor saved = original.cursor();
    ASSERT_EQ(saved.epoch, 1u);
    ASSERT_EQ(saved.position, 2u);
    DataOrder other(plan(), 2, 42);  // batch size changed
    EXPECT_FALSE(other.restore(saved));
    EXPECT_EQ(other.cursor().epoch, 1u);
    EXPECT_EQ(other.cursor().position, 0u);
    const std::vector<Batch> epoch1 = other.epoch_batches(1);
    expect_same(take(other, 3), std::vector<Batch>(epoch1.begin(), epoch1.begin() + 3));
    DataOrder reseeded(plan(), 3, 43);
    EXPECT_FALSE(reseeded.restore(saved));
}

TEST(DataCursor, MalformedJsonIsReported) {
    try {
        cursor_from_json("{");
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()).rfind("data cursor is not valid JSON: ", 0), 0u);
    }
    try {
        cursor_from_json(R"({"epoch":1,"seed":2,"fingerprint":"x"})");
        FAIL();
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(),
                     "data cursor needs a non-negative integer \"position\", got: "
                     "{\"epoch\":1,\"fingerprint\":\"x\",\"seed\":2}");
    }
    try {
        cursor_from_json(R"({"epoch":-1,"position":0,"seed":2,"fingerprint":"x"})");
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(
            std::string(e.what()).rfind("data cursor needs a non-negative integer \"epoch\"", 0),
            0u);
    }
    try {
        cursor_from_json(R"({"epoch":1,"position":0,"seed":2})");
        FAIL();
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(),
                     "data cursor needs a string \"fingerprint\", got: "
                     "{\"epoch\":1,\"position\":0,\"seed\":2}");
    }
    EXPECT_THROW(cursor_from_json("[]"), Error);
}

TEST(DataOrder, ReplacingThePlanAfterABucketDropKeepsThePosition) {
    const std::vector<DatasetItem> all = items();
    DataOrder order(plan(), 2, 5);
    take(order, 3);
    std::optional<BucketPlan> dropped =
        drop_largest_bucket(order.plan(), all, kMixedAspectSizes, 16);
    ASSERT_TRUE(dropped);
    const std::string before = order.cursor().fingerprint;
    order.replace_plan(*dropped);
    EXPECT_NE(order.cursor().fingerprint, before);
    EXPECT_EQ(order.cursor().position, 3u);
    for (const Batch& b : take(order, 10)) {
        EXPECT_NE(b.bucket.key(), "512x512");
        for (std::size_t item : b.items) EXPECT_EQ(order.plan().item_bucket[item], b.bucket);
    }
    // A resumed run rebuilds the same capped plan, so its cursor restores exactly.
    DataOrder resumed(assign_buckets(all, kMixedAspectSizes, 16, dropped->max_pixels), 2, 5);
    EXPECT_TRUE(resumed.restore(order.cursor()));
    expect_same(take(resumed, 10), take(order, 10));
}

TEST(DataOrder, SlotRngsDependOnlyOnTheirCoordinates) {
    DataOrder order(plan(), 2, 9);
    const Batch b = order.next_batch();
    Rng r1 = b.slot_rng(9, 0), r2 = b.slot_rng(9, 0), r3 = b.slot_rng(9, 1);
    const std::uint64_t v = r1();
    EXPECT_EQ(v, r2());
    EXPECT_NE(v, r3());
    Batch later = order.epoch_batches(3)[0];
    EXPECT_NE(later.slot_rng(9, 0)(), v);
}

TEST(DataOrder, RejectsAnEmptyPlanOrBatchSize) {
    EXPECT_THROW(DataOrder(BucketPlan{}, 1, 0), Error);
    EXPECT_THROW(DataOrder(plan(), 0, 0), Error);
}

}  // namespace
}  // namespace loom::data
