// PrefetchingWeightSource on the simulated device: layers fetched in a learned order get their
// copies ahead of time, a fetch out of that order still gets its own weights, and the copies made
// ahead are counted against the budget, bounded by kDepth layers, and released by drop().

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <vector>

#include "loom/device/device.h"
#include "loom/device/host_memory.h"
#include "loom/train/prefetching_weight_source.h"

namespace loom {
namespace {

constexpr std::size_t kLayerCount = 6;

class PrefetchingWeightSourceTest : public ::testing::Test {
  protected:
    void SetUp() override {
        device = open_device({DeviceKind::kSim}, std::uint64_t{64} << 20);
        HostAllocations host;  // resident weights live on the host, as block streaming keeps them
        torch::manual_seed(0);
        for (std::size_t i = 0; i < kLayerCount; ++i) {
            const int64_t width = 8 + 4 * static_cast<int64_t>(i);  // every layer a different size
            weights.push_back(torch::randn({width, 16}));
            biases.push_back(i % 2 == 0 ? torch::randn({width}) : at::Tensor());  // some have none
        }
    }

    std::uint64_t layer_bytes(std::size_t i) const {
        return weights[i].nbytes() + (biases[i].defined() ? biases[i].nbytes() : 0);
    }

    // Fetches layer i and checks that the copies are device-resident and equal to its weights.
    void fetch_and_check(PrefetchingWeightSource& source, std::size_t i) {
        const std::uint64_t before = device->stats().allocated;
        const FetchedWeights w = source.fetch(weights[i], biases[i]);
        ASSERT_TRUE(torch::equal(w.weight, weights[i])) << "layer " << i;
        ASSERT_EQ(w.bias.defined(), biases[i].defined()) << "layer " << i;
        if (w.bias.defined()) {
            ASSERT_TRUE(torch::equal(w.bias, biases[i])) << "layer " << i;
        }
        EXPECT_NE(w.weight.data_ptr(), weights[i].data_ptr());  // a copy, not the host tensor
        // Alive now: this layer's copies and at most kDepth layers copied ahead.
        std::uint64_t ahead = 0;
        std::vector<std::uint64_t> sizes;
        for (std::size_t l = 0; l < kLayerCount; ++l) sizes.push_back(layer_bytes(l));
        std::sort(sizes.rbegin(), sizes.rend());
        for (std::size_t k = 0; k < PrefetchingWeightSource::kDepth; ++k) ahead += sizes[k];
        EXPECT_LE(device->stats().allocated, before + layer_bytes(i) + ahead);
        peak_seen = std::max(peak_seen, device->stats().allocated);
    }

    // A checkpointed-looking pass: 0..5 forward, then {3, 4, 5} and {0, 1, 2} recomputed.
    void pass(PrefetchingWeightSource& source) {
        for (std::size_t i : {0, 1, 2, 3, 4, 5, 3, 4, 5, 0, 1, 2}) fetch_and_check(source, i);
    }

    std::unique_ptr<Device> device;
    std::vector<at::Tensor> weights;
    std::vector<at::Tensor> biases;
    std::uint64_t peak_seen = 0;
};

TEST_F(PrefetchingWeightSourceTest, ServesLearnedPassesFromCopiesMadeAhead) {
    PrefetchingWeightSource source(*device, kLayerCount);
    for (int i = 0; i < 3; ++i) pass(source);
    const PrefetchingWeightSource::Stats learning = source.stats();
    EXPECT_EQ(learning.periods, 1u);
    for (int i = 0; i < 2; ++i) pass(source);
    const PrefetchingWeightSource::Stats s = source.stats();
    EXPECT_EQ(s.hits - learning.hits, 24u);  // every fetch of the last two passes
    EXPECT_EQ(s.direct, learning.direct);
    EXPECT_EQ(source.queued(), PrefetchingWeightSource::kDepth);
    // The copies made ahead are device memory; drop() gives it back.
    const std::uint64_t held = device->stats().allocated;
    EXPECT_EQ(held, layer_bytes(0) + layer_bytes(1));  // the next pass's first two layers
    source.drop();
    EXPECT_EQ(source.queued(), 0u);
    EXPECT_EQ(device->stats().allocated, 0u);
}

// A fetch the learned order did not predict (a different pass shape, a retry): its own weights,
// copied on demand, and the copies made ahead for what was predicted are let go.
TEST_F(PrefetchingWeightSourceTest, AFetchOutOfOrderGetsItsOwnWeights) {
    PrefetchingWeightSource source(*device, kLayerCount);
    for (int i = 0; i < 3; ++i) pass(source);
    fetch_and_check(source, 0);
    fetch_and_check(source, 1);  // layers 2 and 3 are copied ahead now
    const PrefetchingWeightSource::Stats before = source.stats();
    for (std::size_t i : {5, 0, 4, 4, 2}) fetch_and_check(source, i);
    const PrefetchingWeightSource::Stats after = source.stats();
    EXPECT_GT(after.direct, before.direct);
    EXPECT_GT(after.wasted, before.wasted);
}

// A resident weight replaced after its copy was made ahead (set_data, as low_vram's bf16
// conversion does): the stale copy is not served.
TEST_F(PrefetchingWeightSourceTest, AReplacedResidentIsNotServedFromAStaleCopy) {
    PrefetchingWeightSource source(*device, kLayerCount);
    for (int i = 0; i < 3; ++i) pass(source);
    fetch_and_check(source, 0);  // layer 1 is copied ahead now
    {
        HostAllocations host;
        torch::NoGradGuard no_grad;
        weights[1].set_data(torch::full_like(weights[1], 7.0));
    }
    fetch_and_check(source, 1);
}

// No room for the copies ahead: the fetch still succeeds (copied on demand); prefetch waits a
// period before trying again.
TEST_F(PrefetchingWeightSourceTest, NoRoomForCopiesAheadIsNotAnError) {
    std::uint64_t largest = 0;
    for (std::size_t l = 0; l < kLayerCount; ++l) largest = std::max(largest, layer_bytes(l));
    device = nullptr;  // one sim device at a time: this one has room for one layer's copies
    device = open_device({DeviceKind::kSim}, largest + 64);
    PrefetchingWeightSource source(*device, kLayerCount);
    for (int i = 0; i < 4; ++i) pass(source);
    EXPECT_GT(source.stats().no_room, 0u);
    EXPECT_LE(peak_seen, largest + 64);
}

}  // namespace
}  // namespace loom
