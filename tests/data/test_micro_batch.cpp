// A step's items cut into micro-batches: same items, same slots, whatever the micro-batch size;
// items of a dropped bucket move one size down.

#include <gtest/gtest.h>

#include <algorithm>

#include "loom/core/error.h"
#include "loom/data/micro_batch.h"

namespace loom::data {
namespace {

BucketPlan two_bucket_plan() {
    BucketPlan p;
    p.item_bucket = {{64, 64}, {64, 64}, {96, 64}, {96, 64}, {64, 64}, {96, 64}};
    return p;
}

Batch batch_of(std::vector<std::size_t> items, BucketSize bucket, std::uint64_t index) {
    Batch b;
    b.bucket = bucket;
    b.items = std::move(items);
    b.index = index;
    return b;
}

std::vector<std::size_t> slots_of(const std::vector<MicroBatch>& micro) {
    std::vector<std::size_t> out;
    for (const MicroBatch& m : micro) {
        for (const StepSlot& s : m.slots) out.push_back(s.slot);
    }
    return out;
}

// Two ranks share each batch of 4: rank 0 trains positions 0-1, rank 1 positions 2-3, with the
// slots one process would give them; together they are the unsharded step.
TEST(MicroBatch, RanksShareEachBatchKeepingTheirSlots) {
    const std::vector<Batch> batches = {batch_of({0, 2, 1, 3}, {64, 64}, 0),
                                        batch_of({4, 5, 0, 1}, {64, 64}, 1)};
    const auto whole = split_micro_batches(batches, two_bucket_plan(), 4);
    const auto rank0 = split_micro_batches(batches, two_bucket_plan(), 4, {0, 2});
    const auto rank1 = split_micro_batches(batches, two_bucket_plan(), 4, {1, 2});
    std::vector<std::size_t> items0, items1;
    for (const auto& m : rank0)
        for (const StepSlot& s : m.slots) items0.push_back(s.item);
    for (const auto& m : rank1)
        for (const StepSlot& s : m.slots) items1.push_back(s.item);
    EXPECT_EQ(items0, (std::vector<std::size_t>{0, 2, 4, 5}));
    EXPECT_EQ(items1, (std::vector<std::size_t>{1, 3, 0, 1}));
    EXPECT_EQ(slots_of(rank0), (std::vector<std::size_t>{0, 1, 4, 5}));
    EXPECT_EQ(slots_of(rank1), (std::vector<std::size_t>{2, 3, 6, 7}));
    EXPECT_EQ(rank1.front().slots.front().k, 2u);  // its position in the whole batch
    std::vector<std::size_t> together = slots_of(rank0);
    for (std::size_t s : slots_of(rank1)) together.push_back(s);
    std::vector<std::size_t> all = slots_of(whole);
    std::sort(together.begin(), together.end());
    std::sort(all.begin(), all.end());
    EXPECT_EQ(together, all);
    EXPECT_THROW(split_micro_batches(batches, two_bucket_plan(), 4, {0, 3}), Error);
}

TEST(MicroBatch, WholeBatchesStayWholeWhenTheMicroBatchIsTheBatch) {
    const std::vector<Batch> batches = {batch_of({0, 1, 4}, {64, 64}, 0),
                                        batch_of({2, 3, 5}, {96, 64}, 1)};
    const auto micro = split_micro_batches(batches, two_bucket_plan(), 3);
    ASSERT_EQ(micro.size(), 2u);
    EXPECT_EQ(micro[0].bucket, (BucketSize{64, 64}));
    EXPECT_EQ(micro[1].bucket, (BucketSize{96, 64}));
    EXPECT_EQ(slots_of(micro), (std::vector<std::size_t>{0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(micro[1].slots[2].item, 5u);
    EXPECT_EQ(micro[1].slots[2].batch, 1u);
    EXPECT_EQ(micro[1].slots[2].k, 2u);
}

TEST(MicroBatch, BatchOneGivesOneMicroBatchPerItemInSlotOrder) {
    const std::vector<Batch> batches = {batch_of({0, 1, 4}, {64, 64}, 0),
                                        batch_of({2, 3, 5}, {96, 64}, 1)};
    const auto micro = split_micro_batches(batches, two_bucket_plan(), 1);
    ASSERT_EQ(micro.size(), 6u);
    EXPECT_EQ(slots_of(micro), (std::vector<std::size_t>{0, 1, 2, 3, 4, 5}));
    for (const MicroBatch& m : micro) EXPECT_EQ(m.slots.size(), 1u);
    EXPECT_EQ(split_micro_batches(batches, two_bucket_plan(), 2).size(), 4u);  // 2+1, 2+1
}

TEST(MicroBatch, ItemsOfADroppedBucketMoveToTheirNewBucket) {
    // The batch was drawn from bucket 96x64; then that bucket was dropped and items 2 and 5
    // moved to 64x48 while item 3 (say, a different aspect) went to 64x64.
    BucketPlan after = two_bucket_plan();
    after.item_bucket[2] = {64, 48};
    after.item_bucket[3] = {64, 64};
    after.item_bucket[5] = {64, 48};
    const std::vector<Batch> batches = {batch_of({2, 3, 5}, {96, 64}, 0)};
    const auto micro = split_micro_batches(batches, after, 4);
    ASSERT_EQ(micro.size(), 2u);
    EXPECT_EQ(micro[0].bucket, (BucketSize{64, 48}));
    ASSERT_EQ(micro[0].slots.size(), 2u);
    EXPECT_EQ(micro[0].slots[0].slot, 0u);
    EXPECT_EQ(micro[0].slots[1].slot, 2u);
    EXPECT_EQ(micro[1].bucket, (BucketSize{64, 64}));
    EXPECT_EQ(micro[1].slots[0].item, 3u);
    EXPECT_EQ(micro[1].slots[0].slot, 1u);
}

TEST(MicroBatch, PaddedRepeatsKeepTheirOwnSlots) {
    const std::vector<Batch> batches = {batch_of({0, 1, 0, 1}, {64, 64}, 0)};
    const auto micro = split_micro_batches(batches, two_bucket_plan(), 2);
    ASSERT_EQ(micro.size(), 2u);
    EXPECT_EQ(slots_of(micro), (std::vector<std::size_t>{0, 1, 2, 3}));
}

TEST(MicroBatch, RejectsAnEmptyMicroBatch) {
    EXPECT_THROW(split_micro_batches({}, two_bucket_plan(), 0), Error);
}

}  // namespace
}  // namespace loom::data
