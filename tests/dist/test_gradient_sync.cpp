// Gradients summed over ranks as one flat buffer: each rank's grads, of different shapes, dtypes
// and with one missing, come back as the sum on every rank.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "loom/dist/gradient_sync.h"
#include "loom/dist/process_group.h"
#include "rank_threads.h"

namespace loom::dist {
namespace {

TEST(GradientSync, EveryRankGetsTheSumOfEveryGradient) {
    if (!process_groups_supported()) GTEST_SKIP() << "built without Gloo's headers";
    on_ranks(2, [](ProcessGroup& g) {
        const float r = float(g.rank() + 1);  // rank 0: 1, rank 1: 2
        at::Tensor a = at::zeros({2, 3}, at::kFloat);
        at::Tensor b = at::zeros({4}, at::kDouble);
        at::Tensor c = at::zeros({5}, at::kFloat);
        a.mutable_grad() = at::full({2, 3}, r, at::kFloat);
        b.mutable_grad() = at::arange(4, at::kDouble) * r;
        // Only rank 1 reached c (rank 0's items never touched its module).
        if (g.rank() == 1) c.mutable_grad() = at::ones({5}, at::kFloat);
        const double loss = all_reduce_gradients(g, {a, b, c}, 0.25 * r);
        EXPECT_DOUBLE_EQ(loss, 0.75);
        EXPECT_TRUE(at::equal(a.grad(), at::full({2, 3}, 3.0f)));
        EXPECT_EQ(b.grad().scalar_type(), at::kDouble);
        EXPECT_TRUE(at::allclose(b.grad(), at::arange(4, at::kDouble) * 3));
        ASSERT_TRUE(c.grad().defined());
        EXPECT_TRUE(at::equal(c.grad(), at::ones({5}, at::kFloat)));
    });
}

}  // namespace
}  // namespace loom::dist
