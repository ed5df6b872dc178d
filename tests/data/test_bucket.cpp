// Bucket math against hand-computed examples of ai-toolkit's rule (toolkit/buckets.py), item
// expansion, batching with padding, and the OOM ladder's bucket drop. Pure: no torch, no files.

#include <gtest/gtest.h>

#include "loom/core/error.h"
#include "loom/data/bucket.h"

namespace loom::data {
namespace {

struct Case {
    int w, h, resolution, divisibility;
    int bw, bh;
};

// Each expected size worked by hand from the rule in bucket.h, e.g. 640x480 at 512/16:
// 307200 px > 262144, s = sqrt(262144/307200) = 0.92376, wr = 36.95, hr = 27.71;
// candidates 576x432 (248832), 576x448 (258048), 592x432 (255744), 592x448 (265216 > budget);
// closest to 262144: 576x448.
const Case kCases[] = {
    {1024, 1024, 512, 16, 512, 512},    // square, downscaled by 2
    {512, 512, 512, 16, 512, 512},      // exactly the budget
    {640, 480, 512, 16, 576, 448},      // 4:3 landscape
    {1920, 1080, 512, 16, 672, 384},    // 16:9, hr is exactly 24
    {1080, 1920, 512, 16, 384, 672},    // 9:16 portrait
    {3000, 500, 512, 16, 1248, 208},    // 6:1 panorama
    {4000, 3000, 1024, 16, 1168, 896},  // 12 MP photo at 1024
    {768, 1024, 1024, 16, 768, 1024},   // smaller than the budget: kept as is
    {300, 200, 512, 16, 288, 208},      // small: never scaled up to the budget (60000 px)
    {500, 400, 512, 16, 496, 400},      // small: 31.25 x 25 blocks -> 496x400
    {8, 8, 512, 16, 16, 16},            // tinier than one block
    {1024, 768, 512, 32, 576, 448},     // Flux-style divisibility 32
    {2048, 2048, 768, 16, 768, 768},    // square at 768
    {1000, 1500, 768, 8, 624, 944},     // 2:3 with divisibility 8
    {10000, 10, 512, 16, 10000, 16},    // degenerate strip: the height rounds up to one block
};

TEST(BucketRule, HandComputedExamples) {
    for (const Case& c : kCases) {
        const BucketSize b = bucket_for_image(c.w, c.h, c.resolution, c.divisibility);
        EXPECT_EQ(b.key(), (BucketSize{c.bw, c.bh}.key()))
            << c.w << "x" << c.h << " at " << c.resolution << "/" << c.divisibility;
        EXPECT_EQ(b.width % c.divisibility, 0);
        EXPECT_EQ(b.height % c.divisibility, 0);
        EXPECT_LE(b.area(), std::int64_t(c.resolution) * c.resolution);
    }
}

TEST(BucketRule, SmallImagesAreNeverGivenMorePixelsThanTheyHaveRoundedUp) {
    // target = w*h when below the budget: the bucket's area stays within one block row/column
    // of the image's own area, whatever the resolution.
    for (int res : {512, 768, 1024, 2048}) {
        const BucketSize b = bucket_for_image(300, 200, res, 16);
        EXPECT_EQ(b.key(), "288x208") << res;
    }
}

TEST(BucketRule, TiesGoToTheFirstCandidateLikePythonsMin) {
    // 1024x1024 with a budget of 258048 px: wr = hr = 31.749; 496x512 and 512x496 are both
    // 4096 px from the target; ai-toolkit's min() keeps the first, (floor w, ceil h).
    EXPECT_EQ(bucket_for_pixels(1024, 1024, 258048, 16).key(), "496x512");
}

TEST(BucketRule, RejectsNonsense) {
    try {
        bucket_for_image(0, 10, 512, 16);
        FAIL();
    } catch (const Error& e) {
        EXPECT_STREQ(
            e.what(),
            "cannot bucket a 0x10 image with a budget of 262144 pixels and divisibility 16");
    }
    EXPECT_THROW(bucket_for_image(10, 10, 512, 0), Error);
}

TEST(CropPlan, ScalesByTheLargerFactorAndCentres) {
    CropPlan p = plan_crop(1920, 1080, {672, 384});
    EXPECT_EQ(p.scale_width, 683);  // ceil(1920 * 384/1080 = 682.67)
    EXPECT_EQ(p.scale_height, 384);
    EXPECT_EQ(p.crop_x, 5);
    EXPECT_EQ(p.crop_y, 0);
    p = plan_crop(300, 200, {288, 208});  // scaled up by 4% to cover the taller bucket
    EXPECT_EQ(p.scale_width, 312);
    EXPECT_EQ(p.scale_height, 208);
    EXPECT_EQ(p.crop_x, 12);
    p = plan_crop(1000, 1500, {624, 944});
    EXPECT_EQ(p.scale_width, 630);  // ceil(1000 * 944/1500 = 629.33)
    EXPECT_EQ(p.scale_height, 944);
    EXPECT_EQ(p.crop_x, 3);
    p = plan_crop(512, 512, {512, 512});
    EXPECT_EQ(p.scale_width, 512);
    EXPECT_EQ(p.crop_x, 0);
}

TEST(ExpandItems, ResolutionsRepeatsAndFlipsLikeAiToolkit) {
    const std::vector<DatasetItem> items = expand_items(2, {512, 768}, 2, true, false);
    ASSERT_EQ(items.size(), 16u);  // 2 resolutions x (2 images x 2 repeats) x 2 (flip_x)
    const std::vector<std::size_t> images = {0, 1, 0, 1, 0, 1, 0, 1};
    for (std::size_t i = 0; i < 16; ++i) {
        EXPECT_EQ(items[i].image, images[i % 8]) << i;
        EXPECT_EQ(items[i].resolution, i < 8 ? 512 : 768) << i;
        EXPECT_EQ(items[i].flip_x, i % 8 >= 4) << i;
        EXPECT_FALSE(items[i].flip_y);
    }
    // Both flips: original, x, y, xy.
    const std::vector<DatasetItem> both = expand_items(1, {512}, 1, true, true, 3, 10);
    ASSERT_EQ(both.size(), 4u);
    EXPECT_EQ(both[0], (DatasetItem{10, 3, 512, false, false}));
    EXPECT_EQ(both[1], (DatasetItem{10, 3, 512, true, false}));
    EXPECT_EQ(both[2], (DatasetItem{10, 3, 512, false, true}));
    EXPECT_EQ(both[3], (DatasetItem{10, 3, 512, true, true}));
}

// Images: 0 = 1024x1024 -> 512x512, 1 = 1920x1080 -> 672x384, 2 = 300x200 -> 288x208.
const std::vector<ImageSize> kSizes = {{1024, 1024}, {1920, 1080}, {300, 200}};

TEST(AssignBuckets, SortedBySizeWithEveryItemOnce) {
    const std::vector<DatasetItem> items = expand_items(3, {512}, 2, false, false);
    const BucketPlan plan = assign_buckets(items, kSizes, 16);
    ASSERT_EQ(plan.buckets.size(), 3u);
    EXPECT_EQ(plan.buckets[0].size.key(), "288x208");
    EXPECT_EQ(plan.buckets[1].size.key(), "672x384");
    EXPECT_EQ(plan.buckets[2].size.key(), "512x512");
    EXPECT_EQ(plan.buckets[0].items, (std::vector<std::size_t>{2, 5}));
    EXPECT_EQ(plan.buckets[2].items, (std::vector<std::size_t>{0, 3}));
    EXPECT_EQ(plan.largest()->size.key(), "512x512");
    EXPECT_EQ(plan.item_bucket[4].key(), "672x384");
    // Two resolutions: one copy per entry, each in its own buckets.
    const BucketPlan multi =
        assign_buckets(expand_items(1, {512, 1024}, 1, false, false), {{2048, 2048}}, 16);
    ASSERT_EQ(multi.buckets.size(), 2u);
    EXPECT_EQ(multi.buckets[1].size.key(), "1024x1024");
    try {
        assign_buckets({{5, 0, 512, false, false}}, kSizes, 16);
        FAIL();
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "item 0 refers to image 5 but only 3 images are known");
    }
}

// A video dataset's clips and images of one size are buckets of their own per frame count
// (ai-toolkit's "WxHxFf" key); an image's key stays "WxH".
TEST(AssignBuckets, ClipsBucketByFrameCountToo) {
    std::vector<DatasetItem> items = expand_items(3, {512}, 1, false, false);
    items[0].frames = 9;  // a clip
    items[1].frames = 9;  // a clip of another size
    items[2].frames = 1;  // an image
    const std::vector<ImageSize> sizes = {{1024, 1024}, {1920, 1080}, {1024, 1024}};
    const BucketPlan plan = assign_buckets(items, sizes, 16);
    ASSERT_EQ(plan.buckets.size(), 3u);
    EXPECT_EQ(plan.buckets[0].size.key(), "672x384x9f");
    EXPECT_EQ(plan.buckets[1].size.key(), "512x512");
    EXPECT_EQ(plan.buckets[2].size.key(), "512x512x9f");
    EXPECT_EQ(plan.largest()->size.key(), "512x512x9f");  // same area: the longer clip
    EXPECT_EQ(plan.item_bucket[0], (BucketSize{512, 512, 9}));
    EXPECT_NE(plan.item_bucket[0], plan.item_bucket[2]);
    // Fewer frames is another bucket; dropping the largest area keeps each item's frames.
    items[0].frames = 5;
    const BucketPlan fewer = assign_buckets(items, sizes, 16);
    EXPECT_EQ(fewer.item_bucket[0].key(), "512x512x5f");
    const std::optional<BucketPlan> dropped = drop_largest_bucket(fewer, items, sizes, 16);
    ASSERT_TRUE(dropped.has_value());
    EXPECT_EQ(dropped->item_bucket[0].key(), "496x512x5f");  // under the cap 672 * 384
    EXPECT_EQ(dropped->item_bucket[2].key(), "496x512");     // an image stays an image
}

TEST(DropLargestBucket, ReBucketsOneSizeDownUntilOneAreaIsLeft) {
    const std::vector<DatasetItem> items = expand_items(3, {512}, 1, false, false);
    const BucketPlan plan = assign_buckets(items, kSizes, 16);
    EXPECT_EQ(next_smaller_cap(plan), std::optional<std::int64_t>(672 * 384));

    // Rung 1: the 512x512 item moves under 258048 px (tie -> 496x512); the others keep theirs.
    std::optional<BucketPlan> one = drop_largest_bucket(plan, items, kSizes, 16);
    ASSERT_TRUE(one);
    EXPECT_EQ(one->max_pixels, std::optional<std::int64_t>(258048));
    EXPECT_EQ(one->item_bucket[0].key(), "496x512");
    EXPECT_EQ(one->item_bucket[1].key(), "672x384");
    EXPECT_EQ(one->item_bucket[2].key(), "288x208");
    EXPECT_EQ(one->largest()->size.key(), "672x384");  // 258048 > 253952

    // Rung 2: now the 16:9 bucket is the largest; its item moves under 253952 px.
    std::optional<BucketPlan> two = drop_largest_bucket(*one, items, kSizes, 16);
    ASSERT_TRUE(two);
    EXPECT_EQ(two->item_bucket[0].key(), "496x512");
    EXPECT_EQ(two->item_bucket[1].key(), "656x384");
    EXPECT_EQ(two->largest()->size.key(), "496x512");

    // Rung 3: 1024x1024 under 251904 px -> 496x496.
    std::optional<BucketPlan> three = drop_largest_bucket(*two, items, kSizes, 16);
    ASSERT_TRUE(three);
    EXPECT_EQ(three->item_bucket[0].key(), "496x496");

    // Areas strictly decrease until a single area remains.
    BucketPlan p = *three;
    int rungs = 0;
    while (std::optional<BucketPlan> next = drop_largest_bucket(p, items, kSizes, 16)) {
        ASSERT_LT(next->largest()->size.area(), p.largest()->size.area());
        p = *next;
        ASSERT_LT(++rungs, 1000);
    }
    EXPECT_FALSE(next_smaller_cap(p));
    for (const Bucket& b : p.buckets) EXPECT_EQ(b.size.area(), p.buckets[0].size.area());
}

TEST(DropLargestBucket, NothingToDropWithOneBucket) {
    const std::vector<DatasetItem> items = expand_items(1, {512}, 3, false, false);
    const BucketPlan plan = assign_buckets(items, {{640, 480}}, 16);
    EXPECT_FALSE(next_smaller_cap(plan));
    EXPECT_FALSE(drop_largest_bucket(plan, items, {{640, 480}}, 16));
}

TEST(MakeBatches, ShortLastBatchIsPaddedWithItsOwnItems) {
    const std::vector<std::size_t> items = {1, 2, 3, 4, 5};
    EXPECT_EQ(make_batches(items, 2),
              (std::vector<std::vector<std::size_t>>{{1, 2}, {3, 4}, {5, 5}}));
    EXPECT_EQ(make_batches(items, 4),
              (std::vector<std::vector<std::size_t>>{{1, 2, 3, 4}, {5, 5, 5, 5}}));
    EXPECT_EQ(make_batches({1, 2, 3, 4, 5, 6}, 4),
              (std::vector<std::vector<std::size_t>>{{1, 2, 3, 4}, {5, 6, 5, 6}}));
    EXPECT_EQ(make_batches({7}, 3), (std::vector<std::vector<std::size_t>>{{7, 7, 7}}));
    EXPECT_TRUE(make_batches({}, 3).empty());
    try {
        make_batches(items, 0);
        FAIL();
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "batch size must be at least 1, got 0");
    }
}

TEST(GroupByBucket, SplitsARetriedBatchByItsNewBuckets) {
    // Two images that share 512x512 at 512 but land in different buckets under a 500² cap.
    const std::vector<ImageSize> sizes = {{1024, 1024}, {1060, 1000}};
    const std::vector<DatasetItem> items = expand_items(2, {512}, 1, false, false);
    const BucketPlan plan = assign_buckets(items, sizes, 16);
    ASSERT_EQ(plan.buckets.size(), 1u);
    const BucketPlan capped = assign_buckets(items, sizes, 16, 500 * 500);
    const auto groups = group_by_bucket({0, 1, 0, 1}, capped);
    ASSERT_EQ(groups.size(), 2u);
    EXPECT_EQ(groups[0].first.key(), "496x496");
    EXPECT_EQ(groups[0].second, (std::vector<std::size_t>{0, 0}));
    EXPECT_EQ(groups[1].first.key(), "512x480");
    EXPECT_EQ(groups[1].second, (std::vector<std::size_t>{1, 1}));
    EXPECT_THROW(group_by_bucket({9}, capped), Error);
}

}  // namespace
}  // namespace loom::data
