#pragma once

// Aspect-ratio buckets (ai-toolkit.md §3) and the training items they hold. Pure functions, no
// torch, no I/O.
//
// ai-toolkit's rule (toolkit/buckets.py get_bucket_for_image_size) for an image of w x h with a
// pixel budget P (resolution², or a smaller cap after the OOM ladder dropped buckets) and a
// divisibility d (the model's: 16 for SD 1.5/SDXL):
//   target = min(w*h, P)                       never upscale
//   s = sqrt(target / (w*h)); wr = w*s/d, hr = h*s/d
//   candidates, in this order: (⌊wr⌋,⌊hr⌋), (⌊wr⌋,⌈hr⌉), (⌈wr⌉,⌊hr⌋), (⌈wr⌉,⌈hr⌉), each times d
//   keep the positive ones with area <= P; take the first whose area is closest to target
//   (none kept: (max(d, ⌊wr⌋d), max(d, ⌊hr⌋d)))
// The image is then scaled by max(bw/w, bh/h), both sides rounded up, and centre-cropped.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loom::data {

// A bucket's frame size, and for video datasets its clip length: items of one bucket stack into
// one batch.
struct BucketSize {
    int width = 0;
    int height = 0;
    int frames = 1;  // 1 for images (and a video dataset's images, one-frame clips)

    std::int64_t area() const { return std::int64_t(width) * height; }  // pixels per frame
    // "768x512", as ai-toolkit prints it; clips "768x512x9f" (ai-toolkit's video key).
    std::string key() const;
    bool operator==(const BucketSize& o) const {
        return width == o.width && height == o.height && frames == o.frames;
    }
    bool operator!=(const BucketSize& o) const { return !(*this == o); }
    // Smaller area first, then narrower first, then fewer frames: a total order for sorted
    // output.
    bool operator<(const BucketSize& o) const;
};

// ai-toolkit's rule with a budget of max_pixels (see the top of this file).
// Throws loom::Error for non-positive sizes, budget or divisibility.
BucketSize bucket_for_pixels(int width, int height, std::int64_t max_pixels, int divisibility);
// The same with max_pixels = resolution².
BucketSize bucket_for_image(int width, int height, int resolution, int divisibility);

// How an image of width x height is scaled and cropped into `bucket` (ai-toolkit setup_buckets):
// scale = max(bw/w, bh/h); scale_width/height = ceil(side * scale); crop at the centre,
// crop_x = (scale_width - bw) / 2 rounded down, likewise crop_y.
struct CropPlan {
    int scale_width = 0;
    int scale_height = 0;
    int crop_x = 0;
    int crop_y = 0;
    BucketSize bucket;
};
CropPlan plan_crop(int width, int height, BucketSize bucket);

// One training example: an image or clip (index into the scanned files) at one resolution
// entry, possibly mirrored, with the frames it trains on (1 for an image). `dataset` is the index
// of the datasets[] entry it came from.
struct DatasetItem {
    std::size_t image = 0;
    std::size_t dataset = 0;
    int resolution = 512;
    bool flip_x = false;
    bool flip_y = false;
    int frames = 1;

    bool operator==(const DatasetItem& o) const {
        return image == o.image && dataset == o.dataset && resolution == o.resolution &&
               flip_x == o.flip_x && flip_y == o.flip_y && frames == o.frames;
    }
};

// The items of one dataset, as ai-toolkit builds them: for each `resolutions` entry (one copy of
// the dataset each, concatenated in order) the images `num_repeats` times over, then flip_x
// appends a mirrored copy of every item so far, then flip_y a vertically flipped copy of every
// item so far (both: original, x, y, xy). `first_image` offsets the image indices.
std::vector<DatasetItem> expand_items(std::size_t image_count, const std::vector<int>& resolutions,
                                      int num_repeats, bool flip_x, bool flip_y,
                                      std::size_t dataset = 0, std::size_t first_image = 0);

// The pixel size of each scanned image, indexed like DatasetItem::image.
struct ImageSize {
    int width = 0;
    int height = 0;
};

struct Bucket {
    BucketSize size;
    std::vector<std::size_t> items;  // indices into the item list, ascending
};

// Every item in exactly one bucket. Buckets are sorted by BucketSize::operator<.
struct BucketPlan {
    std::vector<Bucket> buckets;
    std::vector<BucketSize> item_bucket;     // per item
    std::optional<std::int64_t> max_pixels;  // the cap it was built with, if any

    // The bucket holding the largest area (ties: the wider one, then the longer clip); nullptr
    // when empty.
    const Bucket* largest() const;
    std::size_t item_count() const { return item_bucket.size(); }
};

// Buckets every item with its own resolution (budget resolution²) and frames. With `max_pixels`, an
// item whose bucket is larger than that is bucketed again with max_pixels as its budget; the others
// keep their bucket. Throws loom::Error when an item's image index is out of range.
BucketPlan assign_buckets(const std::vector<DatasetItem>& items,
                          const std::vector<ImageSize>& sizes, int divisibility,
                          std::optional<std::int64_t> max_pixels = std::nullopt);

// The OOM ladder's "drop the largest bucket" rung. The new pixel cap is the area of the
// largest bucket that is strictly smaller than the largest one; nullopt when all buckets have
// the same area (nothing left to drop).
std::optional<std::int64_t> next_smaller_cap(const BucketPlan& plan);
// Re-buckets with next_smaller_cap(plan): the items of the largest bucket move to a smaller
// bucket of their own aspect ratio (never skipped); items already under the cap keep theirs.
// nullopt when nothing is left to drop.
std::optional<BucketPlan> drop_largest_bucket(const BucketPlan& plan,
                                              const std::vector<DatasetItem>& items,
                                              const std::vector<ImageSize>& sizes,
                                              int divisibility);

// Splits one bucket's items (in the given order) into batches of `batch_size`. A short last
// batch is padded by repeating its own items from its start (ai-toolkit), so every batch has
// exactly batch_size entries. Throws loom::Error when batch_size < 1.
std::vector<std::vector<std::size_t>> make_batches(const std::vector<std::size_t>& items,
                                                   int batch_size);

// Groups `items` by their bucket in `plan`, keeping their order: what a retried batch becomes
// after its bucket was dropped (its items may land in different smaller buckets). Groups come in
// order of first appearance.
std::vector<std::pair<BucketSize, std::vector<std::size_t>>> group_by_bucket(
    const std::vector<std::size_t>& items, const BucketPlan& plan);

}  // namespace loom::data
