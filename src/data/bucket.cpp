#include "loom/data/bucket.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>

#include "loom/core/error.h"

namespace loom::data {

std::string BucketSize::key() const {
    std::string k = std::to_string(width);
    k += 'x';
    k += std::to_string(height);
    if (frames > 1) {
        k += 'x';
        k += std::to_string(frames);
        k += 'f';
    }
    return k;
}

bool BucketSize::operator<(const BucketSize& o) const {
    if (area() != o.area()) return area() < o.area();
    if (width != o.width) return width < o.width;
    return frames < o.frames;
}

BucketSize bucket_for_pixels(int width, int height, std::int64_t max_pixels, int divisibility) {
    if (width <= 0 || height <= 0 || max_pixels <= 0 || divisibility <= 0)
        throw Error("cannot bucket a " + std::to_string(width) + "x" + std::to_string(height) +
                    " image with a budget of " + std::to_string(max_pixels) +
                    " pixels and divisibility " + std::to_string(divisibility));
    const std::int64_t pixels = std::int64_t(width) * height;
    const std::int64_t target = std::min(pixels, max_pixels);
    const double scaler = std::sqrt(double(target) / double(pixels));
    const double w_raw = width * scaler / divisibility;
    const double h_raw = height * scaler / divisibility;
    const std::int64_t d = divisibility;
    const std::int64_t wf = std::int64_t(std::floor(w_raw)) * d,
                       wc = std::int64_t(std::ceil(w_raw)) * d;
    const std::int64_t hf = std::int64_t(std::floor(h_raw)) * d,
                       hc = std::int64_t(std::ceil(h_raw)) * d;
    const std::int64_t candidates[4][2] = {{wf, hf}, {wf, hc}, {wc, hf}, {wc, hc}};
    bool found = false;
    std::int64_t best_w = 0, best_h = 0, best_diff = 0;
    for (const auto& c : candidates) {
        if (c[0] <= 0 || c[1] <= 0 || c[0] * c[1] > max_pixels) continue;
        const std::int64_t diff = std::llabs(c[0] * c[1] - target);
        if (!found || diff < best_diff) {  // strict: the first of equals wins, as Python's min
            found = true;
            best_w = c[0], best_h = c[1], best_diff = diff;
        }
    }
    if (!found) best_w = std::max(d, wf), best_h = std::max(d, hf);
    return {int(best_w), int(best_h)};
}

BucketSize bucket_for_image(int width, int height, int resolution, int divisibility) {
    return bucket_for_pixels(width, height, std::int64_t(resolution) * resolution, divisibility);
}

CropPlan plan_crop(int width, int height, BucketSize bucket) {
    if (width <= 0 || height <= 0 || bucket.width <= 0 || bucket.height <= 0)
        throw Error("cannot fit a " + std::to_string(width) + "x" + std::to_string(height) +
                    " image into bucket " + bucket.key());
    const double scale = std::max(double(bucket.width) / width, double(bucket.height) / height);
    CropPlan plan;
    plan.bucket = bucket;
    // ceil of a product that should be exact (bucket side / side * side) must not round up a
    // floating-point hair above an integer.
    auto scaled = [&](int side, int target) {
        const double v = side * scale;
        const double r = std::round(v);
        const int s = std::abs(v - r) < 1e-9 ? int(r) : int(std::ceil(v));
        return std::max(s, target);
    };
    plan.scale_width = scaled(width, bucket.width);
    plan.scale_height = scaled(height, bucket.height);
    plan.crop_x = (plan.scale_width - bucket.width) / 2;
    plan.crop_y = (plan.scale_height - bucket.height) / 2;
    return plan;
}

std::vector<DatasetItem> expand_items(std::size_t image_count, const std::vector<int>& resolutions,
                                      int num_repeats, bool flip_x, bool flip_y,
                                      std::size_t dataset, std::size_t first_image) {
    std::vector<DatasetItem> out;
    for (int resolution : resolutions) {
        std::vector<DatasetItem> copy;
        for (int r = 0; r < std::max(num_repeats, 1); ++r) {
            for (std::size_t i = 0; i < image_count; ++i)
                copy.push_back({first_image + i, dataset, resolution, false, false});
        }
        if (flip_x) {
            const std::size_t n = copy.size();
            for (std::size_t i = 0; i < n; ++i) {
                DatasetItem item = copy[i];
                item.flip_x = true;
                copy.push_back(item);
            }
        }
        if (flip_y) {
            const std::size_t n = copy.size();
            for (std::size_t i = 0; i < n; ++i) {
                DatasetItem item = copy[i];
                item.flip_y = true;
                copy.push_back(item);
            }
        }
        out.insert(out.end(), copy.begin(), copy.end());
    }
    return out;
}

const Bucket* BucketPlan::largest() const {
    if (buckets.empty()) return nullptr;
    return &buckets.back();  // sorted ascending by (area, width)
}

BucketPlan assign_buckets(const std::vector<DatasetItem>& items,
                          const std::vector<ImageSize>& sizes, int divisibility,
                          std::optional<std::int64_t> max_pixels) {
    BucketPlan plan;
    plan.max_pixels = max_pixels;
    plan.item_bucket.reserve(items.size());
    std::map<BucketSize, std::vector<std::size_t>> by_size;
    for (std::size_t i = 0; i < items.size(); ++i) {
        const DatasetItem& item = items[i];
        if (item.image >= sizes.size())
            throw Error("item " + std::to_string(i) + " refers to image " +
                        std::to_string(item.image) + " but only " + std::to_string(sizes.size()) +
                        " images are known");
        const ImageSize s = sizes[item.image];
        BucketSize b = bucket_for_image(s.width, s.height, item.resolution, divisibility);
        // Only items whose bucket is above the cap move; the others keep theirs exactly.
        if (max_pixels && b.area() > *max_pixels)
            b = bucket_for_pixels(s.width, s.height, *max_pixels, divisibility);
        b.frames = item.frames;
        plan.item_bucket.push_back(b);
        by_size[b].push_back(i);
    }
    for (auto& [size, members] : by_size) plan.buckets.push_back({size, std::move(members)});
    return plan;
}

std::optional<std::int64_t> next_smaller_cap(const BucketPlan& plan) {
    const Bucket* top = plan.largest();
    if (top == nullptr) return std::nullopt;
    std::optional<std::int64_t> best;
    for (const Bucket& b : plan.buckets) {
        if (b.size.area() < top->size.area() && (!best || b.size.area() > *best))
            best = b.size.area();
    }
    return best;
}

std::optional<BucketPlan> drop_largest_bucket(const BucketPlan& plan,
                                              const std::vector<DatasetItem>& items,
                                              const std::vector<ImageSize>& sizes,
                                              int divisibility) {
    const std::optional<std::int64_t> cap = next_smaller_cap(plan);
    if (!cap) return std::nullopt;
    return assign_buckets(items, sizes, divisibility, cap);
}

std::vector<std::vector<std::size_t>> make_batches(const std::vector<std::size_t>& items,
                                                   int batch_size) {
    if (batch_size < 1)
        throw Error("batch size must be at least 1, got " + std::to_string(batch_size));
    std::vector<std::vector<std::size_t>> out;
    const std::size_t bs = std::size_t(batch_size);
    for (std::size_t start = 0; start < items.size(); start += bs) {
        const std::size_t end = std::min(start + bs, items.size());
        std::vector<std::size_t> batch(items.begin() + std::ptrdiff_t(start),
                                       items.begin() + std::ptrdiff_t(end));
        const std::size_t own = batch.size();
        for (std::size_t k = 0; batch.size() < bs; ++k) batch.push_back(batch[k % own]);
        out.push_back(std::move(batch));
    }
    return out;
}

std::vector<std::pair<BucketSize, std::vector<std::size_t>>> group_by_bucket(
    const std::vector<std::size_t>& items, const BucketPlan& plan) {
    std::vector<std::pair<BucketSize, std::vector<std::size_t>>> out;
    for (std::size_t item : items) {
        if (item >= plan.item_bucket.size())
            throw Error("item " + std::to_string(item) + " is not in the bucket plan (" +
                        std::to_string(plan.item_bucket.size()) + " items)");
        const BucketSize b = plan.item_bucket[item];
        auto it = std::find_if(out.begin(), out.end(), [&](const auto& g) { return g.first == b; });
        if (it == out.end()) {
            out.push_back({b, {item}});
        } else {
            it->second.push_back(item);
        }
    }
    return out;
}

}  // namespace loom::data
