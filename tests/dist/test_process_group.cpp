// The process group on Gloo over loopback, each rank a thread of this test: the collectives the
// trainer agrees through (sums, "did any rank fail", reports gathered, rank 0's decision
// broadcast), with 2 and 3 ranks; a rank that never answers is an error after the timeout on
// the others, not a hang.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <thread>

#include "loom/dist/process_group.h"
#include "rank_threads.h"

namespace loom::dist {
namespace {

using std::chrono::milliseconds;

class ProcessGroupTest : public ::testing::TestWithParam<int> {
  protected:
    void SetUp() override {
        if (!process_groups_supported()) GTEST_SKIP() << "built without Gloo's headers";
    }
};

TEST_P(ProcessGroupTest, SumsAgreesGathersAndBroadcasts) {
    const int world = GetParam();
    on_ranks(world, [world](ProcessGroup& g) {
        EXPECT_EQ(g.size(), world);
        // A flat gradient buffer: every rank ends with the sum.
        at::Tensor grads = at::arange(6, at::kFloat) * float(g.rank() + 1);
        g.all_reduce_sum(grads);
        const float ranks_sum = float(world * (world + 1) / 2);
        EXPECT_TRUE(at::allclose(grads, at::arange(6, at::kFloat) * ranks_sum));
        // Only rank 1 ran out of memory: every rank learns it; nobody: nobody does.
        EXPECT_TRUE(g.any(g.rank() == 1));
        EXPECT_FALSE(g.any(false));
        // Each rank's report, of different lengths (one empty), in rank order everywhere.
        const std::vector<std::string> reports =
            g.all_gather(g.rank() == 0 ? std::string() : std::string(std::size_t(g.rank()), 'x'));
        ASSERT_EQ(reports.size(), std::size_t(world));
        for (int r = 0; r < world; ++r) EXPECT_EQ(reports[std::size_t(r)], std::string(r, 'x'));
        // Rank 0's decision reaches every rank.
        const std::string decided = g.broadcast(
            g.rank() == 0 ? "train.fewer_frames: datasets.num_frames 9 -> 5" : "ignored", 0);
        EXPECT_EQ(decided, "train.fewer_frames: datasets.num_frames 9 -> 5");
        g.barrier();
    });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ProcessGroupTest, ::testing::Values(2, 3));

// Rank 1 leaves without joining the collective: rank 0 gets a DistError naming what it waited
// for, after the timeout, instead of waiting forever (a hang would end at CTest's TIMEOUT, as a
// failure: reaching the checks below at all is the bound).
TEST(ProcessGroupTimeout, ARankThatNeverAnswersIsAnErrorNotAHang) {
    if (!process_groups_supported()) GTEST_SKIP() << "built without Gloo's headers";
    std::string rank0_error;
    on_ranks(
        2,
        [&](ProcessGroup& g) {
            if (g.rank() == 1) {
                std::this_thread::sleep_for(milliseconds(4000));  // never joins, then leaves
                return;
            }
            try {
                g.any(true);
            } catch (const DistError& e) {
                rank0_error = e.what();
            }
        },
        milliseconds(1500));
    EXPECT_NE(rank0_error.find("rank 0: agreeing on the attempt's outcome failed"),
              std::string::npos)
        << rank0_error;
}

}  // namespace
}  // namespace loom::dist
