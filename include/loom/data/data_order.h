#pragma once

// The order in which batches are drawn, reproducible from (seed, epoch) alone so that a resumed
// run sees exactly the batches it would have seen (DESIGN.md: the data cursor lives in state/).
//
// Epoch e: an Rng seeded with mix_seed(seed, e) shuffles the items of every bucket (buckets in
// plan order), make_batches cuts each bucket into batch_size batches (the last one padded), and
// the list of all batches is shuffled, so buckets interleave. ai-toolkit shuffles items within
// buckets once and batches every epoch; loom reshuffles both each epoch.
//
// Not thread-safe; the training thread owns it.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "loom/data/bucket.h"
#include "loom/data/rng.h"

namespace loom::data {

// Where the data order stands: `position` batches of epoch `epoch` have been handed out.
// `fingerprint` identifies the bucket plan, batch size and seed it belongs to.
struct DataCursor {
    std::uint64_t epoch = 0;
    std::uint64_t position = 0;
    std::uint64_t seed = 0;
    std::string fingerprint;

    bool operator==(const DataCursor& o) const {
        return epoch == o.epoch && position == o.position && seed == o.seed &&
               fingerprint == o.fingerprint;
    }
};

// {"epoch":3,"position":17,"seed":42,"fingerprint":"..."}; from_json throws loom::Error naming
// what is missing or malformed.
std::string cursor_to_json(const DataCursor& cursor);
DataCursor cursor_from_json(std::string_view json);

struct Batch {
    BucketSize bucket;
    std::vector<std::size_t> items;  // item indices, exactly batch_size (padded by repetition)
    std::uint64_t epoch = 0;
    std::uint64_t index = 0;  // position of this batch within its epoch

    // An Rng for the augmentation of slot `slot` (caption dropout/shuffle): a function of
    // (seed, epoch, index, slot) only.
    Rng slot_rng(std::uint64_t seed, std::size_t slot) const;
};

class DataOrder {
  public:
    // Throws loom::Error when the plan has no items or batch_size < 1.
    DataOrder(BucketPlan plan, int batch_size, std::uint64_t seed);

    // The next batch; rolls over into the next epoch after the last one.
    Batch next_batch();

    const DataCursor& cursor() const { return cursor_; }
    // Continues from a saved cursor. Returns true when it belongs to this plan, batch size and
    // seed, so that the following batches are exactly those of the saved run. Otherwise it logs
    // a warning, keeps the saved epoch number, starts that epoch from its beginning and returns
    // false (the dataset or its settings changed).
    bool restore(const DataCursor& cursor);

    // Swaps in a new plan (after drop_largest_bucket). The epoch's order is rebuilt from the
    // new plan and the position is kept, so the epoch continues where it was.
    void replace_plan(BucketPlan plan);

    const BucketPlan& plan() const { return plan_; }
    int batch_size() const { return batch_size_; }
    std::uint64_t seed() const { return seed_; }
    std::size_t batches_per_epoch() const { return epoch_batches_.size(); }
    // The batches of epoch `epoch`, in order (what next_batch hands out).
    std::vector<Batch> epoch_batches(std::uint64_t epoch) const;

  private:
    void build_epoch();

    BucketPlan plan_;
    int batch_size_ = 1;
    std::uint64_t seed_ = 0;
    DataCursor cursor_;
    std::vector<Batch> epoch_batches_;  // of cursor_.epoch
};

// A stable digest of a plan's item-to-bucket assignment, batch size and seed.
std::string plan_fingerprint(const BucketPlan& plan, int batch_size, std::uint64_t seed);

}  // namespace loom::data
