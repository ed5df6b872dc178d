// FetchOrder: the order block streaming fetches layers in, learned from the fetches themselves.
// Keys are small integers cast to pointers; the sequences have the shape of a UNet's passes —
// every layer forward, then under gradient checkpointing the checkpointed segments again in
// reverse, each in forward order, so a layer's successor depends on where in the pass it is.

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "loom/train/fetch_order.h"

namespace loom {
namespace {

using Key = FetchOrder::Key;

Key key(std::uintptr_t i) {
    return reinterpret_cast<Key>(i + 1);  // never nullptr
}

// Layers 0..11 forward. Checkpointed segments {0,1,2} {3,4,5,6} {8,9} {10,11}; layer 7 is not
// checkpointed (a proj_in), so its fetch is not repeated in backward.
const std::vector<std::vector<std::uintptr_t>> kSegments = {
    {0, 1, 2}, {3, 4, 5, 6}, {8, 9}, {10, 11}};
constexpr std::size_t kLayers = 12;

std::vector<Key> forward_pass() {
    std::vector<Key> out;
    for (std::uintptr_t i = 0; i < kLayers; ++i) out.push_back(key(i));
    return out;
}

std::vector<Key> checkpointed_pass() {
    std::vector<Key> out = forward_pass();
    for (auto s = kSegments.rbegin(); s != kSegments.rend(); ++s) {
        for (std::uintptr_t i : *s) out.push_back(key(i));
    }
    return out;
}

// Observes `pass`; returns the number of fetches that were not predicted.
int misses(FetchOrder& order, const std::vector<Key>& pass) {
    int n = 0;
    for (Key k : pass) n += order.observe(k) ? 0 : 1;
    return n;
}

// The period is found when its first layer comes round the third time: two whole passes have
// been seen then. From there on every fetch is predicted.
TEST(FetchOrder, LearnsAForwardOnlyOrderFromTwoPasses) {
    FetchOrder order(kLayers);
    const std::vector<Key> pass = forward_pass();
    EXPECT_EQ(misses(order, pass), 12);
    EXPECT_EQ(misses(order, pass), 12);
    EXPECT_FALSE(order.learned());
    EXPECT_TRUE(order.upcoming(2).empty());
    EXPECT_EQ(misses(order, pass), 1);  // learned at its first fetch, which was not predicted
    ASSERT_TRUE(order.learned());
    EXPECT_EQ(order.period(), kLayers);
    EXPECT_EQ(order.upcoming(2), (std::vector<Key>{key(0), key(1)}));
    EXPECT_EQ(misses(order, pass), 0);
    EXPECT_EQ(misses(order, pass), 0);
    EXPECT_EQ(order.hits(), 11u + 12u + 12u);
}

// The recompute of the first segment ends the pass with 0, 1, 2 — the pass's own beginning — and
// 11 is followed by 10 in the forward but by 0 at the end: the period is the whole pass.
TEST(FetchOrder, LearnsACheckpointedPassWithItsRepeatedLayers) {
    FetchOrder order(kLayers);
    const std::vector<Key> pass = checkpointed_pass();
    for (int i = 0; i < 3; ++i) misses(order, pass);
    ASSERT_TRUE(order.learned());
    EXPECT_EQ(order.period(), pass.size());
    for (std::size_t i = 0; i < pass.size(); ++i) {
        EXPECT_EQ(order.upcoming(1), std::vector<Key>{pass[i]}) << "fetch " << i;
        EXPECT_TRUE(order.observe(pass[i])) << "fetch " << i;
    }
    // After the forward's last layer comes the recompute of the last segment, not layer 0.
    for (std::size_t i = 0; i < kLayers; ++i) order.observe(pass[i]);
    EXPECT_EQ(order.upcoming(3), (std::vector<Key>{key(10), key(11), key(8)}));
}

// Previews between training steps: forward-only passes after a checkpointed order was learned,
// then training again. Each change costs a few passes with misses, then every fetch is predicted.
TEST(FetchOrder, FollowsTheOrderWhenItChanges) {
    FetchOrder order(kLayers);
    for (int i = 0; i < 3; ++i) misses(order, checkpointed_pass());
    ASSERT_EQ(order.period(), checkpointed_pass().size());
    EXPECT_EQ(misses(order, forward_pass()), 0);  // the first is the learned pass's forward part
    EXPECT_GT(misses(order, forward_pass()), 0);
    for (int i = 0; i < 2; ++i) misses(order, forward_pass());
    EXPECT_EQ(order.period(), kLayers);
    EXPECT_EQ(misses(order, forward_pass()), 0);
    EXPECT_GT(misses(order, checkpointed_pass()), 0);
    for (int i = 0; i < 2; ++i) misses(order, checkpointed_pass());
    EXPECT_EQ(order.period(), checkpointed_pass().size());
    EXPECT_EQ(misses(order, checkpointed_pass()), 0);
    EXPECT_EQ(order.periods_learned(), 3u);
}

// A step retried after an OOM starts its pass again from the top: a couple of misses, and the
// learned period still holds.
TEST(FetchOrder, ARestartedPassCostsAFewMisses) {
    FetchOrder order(kLayers);
    const std::vector<Key> pass = checkpointed_pass();
    for (int i = 0; i < 4; ++i) misses(order, pass);
    for (std::size_t i = 0; i < 9; ++i) EXPECT_TRUE(order.observe(pass[i]));  // fails here
    EXPECT_LE(misses(order, pass), 3);
    EXPECT_EQ(misses(order, pass), 0);
    EXPECT_EQ(order.periods_learned(), 1u);
}

// A repeat that does not hold every layer is not a pass (here: a layer fetched three times in a
// row before the passes begin).
TEST(FetchOrder, ARepeatMissingLayersIsNotAPeriod) {
    FetchOrder order(kLayers);
    for (int i = 0; i < 3; ++i) order.observe(key(0));
    EXPECT_FALSE(order.learned());
    for (int i = 0; i < 3; ++i) misses(order, forward_pass());
    EXPECT_TRUE(order.learned());
    EXPECT_EQ(order.period(), kLayers);
}

// A layer the period does not hold is a miss that leaves the prediction where it was.
TEST(FetchOrder, AnUnknownLayerIsAMiss) {
    FetchOrder order(kLayers);
    for (int i = 0; i < 2; ++i) misses(order, forward_pass());
    order.observe(key(0));
    EXPECT_FALSE(order.observe(key(99)));
    EXPECT_EQ(order.upcoming(1), std::vector<Key>{key(1)});
    EXPECT_TRUE(order.observe(key(1)));
}

}  // namespace
}  // namespace loom
