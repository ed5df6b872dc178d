#pragma once

// A training step's items cut into micro-batches (the OOM guard's exact-step retry). A step
// trains on the batches the data order handed out for it — always the same items, whatever the
// plan. Each item keeps its slot (its position in the step), from which its noise, timestep and
// caption randomness derive, so splitting a step differently changes only the order in which
// gradients add up. An item whose bucket was dropped after its batch was drawn goes to the
// bucket the current plan gives it (one size down), never skipped.
//
// Pure: no torch.

#include <cstddef>
#include <vector>

#include "loom/data/bucket.h"
#include "loom/data/data_order.h"

namespace loom::data {

struct StepSlot {
    std::size_t item = 0;   // index into the item list
    std::size_t batch = 0;  // which of the step's batches it came from
    std::size_t k = 0;      // its position in that batch (Batch::slot_rng)
    std::size_t slot = 0;   // its position in the step
};

struct MicroBatch {
    BucketSize bucket;
    std::vector<StepSlot> slots;
};

// The part of each batch one rank of a data-parallel run trains: of a batch of N·b items
// (N = ranks), rank r takes the positions r·b .. r·b + b - 1. Its slots keep their positions in
// the whole batch and step, so their noise, timesteps and caption randomness are those one
// process training every item draws.
struct Shard {
    int rank = 0;
    int ranks = 1;
    bool owns(std::size_t k, std::size_t batch_size) const;
};

// Each batch in order; within a batch, its items (those `shard` owns) grouped by their bucket in
// `plan` (order of first appearance), each group cut into runs of at most `micro_batch_size`.
// Throws loom::Error when micro_batch_size < 1, or when a batch does not split evenly over the
// shard's ranks.
std::vector<MicroBatch> split_micro_batches(const std::vector<Batch>& batches,
                                            const BucketPlan& plan, int micro_batch_size,
                                            Shard shard = {});

}  // namespace loom::data
