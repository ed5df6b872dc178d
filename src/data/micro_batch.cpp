#include "loom/data/micro_batch.h"

#include <algorithm>

#include "loom/core/error.h"

namespace loom::data {

bool Shard::owns(std::size_t k, std::size_t batch_size) const {
    const std::size_t per_rank = batch_size / std::size_t(ranks);
    return k / per_rank == std::size_t(rank);
}

std::vector<MicroBatch> split_micro_batches(const std::vector<Batch>& batches,
                                            const BucketPlan& plan, int micro_batch_size,
                                            Shard shard) {
    if (micro_batch_size < 1) {
        throw Error("the micro-batch size must be at least 1, not " +
                    std::to_string(micro_batch_size));
    }
    std::vector<MicroBatch> out;
    std::size_t slot = 0;
    for (std::size_t b = 0; b < batches.size(); ++b) {
        // Group this batch's slots by their current bucket, keeping order.
        std::vector<MicroBatch> groups;
        const std::size_t size = batches[b].items.size();
        if (shard.ranks < 1 || size % std::size_t(shard.ranks) != 0) {
            throw Error("a batch of " + std::to_string(size) + " items cannot be shared by " +
                        std::to_string(shard.ranks) + " ranks");
        }
        for (std::size_t k = 0; k < size; ++k) {
            if (!shard.owns(k, size)) {
                ++slot;  // another rank's item keeps its slot number
                continue;
            }
            const std::size_t item = batches[b].items[k];
            const BucketSize bucket = plan.item_bucket.at(item);
            auto g = std::find_if(groups.begin(), groups.end(),
                                  [&](const MicroBatch& m) { return m.bucket == bucket; });
            if (g == groups.end()) {
                groups.push_back({bucket, {}});
                g = groups.end() - 1;
            }
            g->slots.push_back({item, b, k, slot++});
        }
        for (const MicroBatch& group : groups) {
            for (std::size_t start = 0; start < group.slots.size();
                 start += std::size_t(micro_batch_size)) {
                const std::size_t end =
                    std::min(group.slots.size(), start + std::size_t(micro_batch_size));
                out.push_back(
                    {group.bucket,
                     {group.slots.begin() + long(start), group.slots.begin() + long(end)}});
            }
        }
    }
    return out;
}

}  // namespace loom::data
