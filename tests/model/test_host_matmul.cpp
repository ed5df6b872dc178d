// The host's Linear products through oneDNN (model/nn/host_matmul.h): the same values as torch's
// addmm within float32 rounding, the input gradient of a frozen layer as at::linear's, and
// at::linear unchanged wherever oneDNN does not apply.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include "loom/model/nn/host_matmul.h"

namespace loom {
namespace {

void expect_close(const at::Tensor& a, const at::Tensor& b, double tol = 1e-5) {
    ASSERT_EQ(a.sizes(), b.sizes());
    EXPECT_TRUE(at::allclose(a, b, tol, tol)) << (a - b).abs().max().item<double>();
}

TEST(HostMatmul, ThisTorchHasOneDnnsKernel) {
    // The CPU speed of LoRA training rests on it (docs/BENCHMARKS.md): a torch without it would
    // silently train at MKL's speed.
    EXPECT_TRUE(host_matmul_uses_onednn());
}

TEST(HostMatmul, RowsTimesWeightMatchesAddmmForEveryShapeAndLayout) {
    at::manual_seed(0);
    torch::NoGradGuard no_grad;
    for (const auto& [m, k, n] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
             {1, 8, 4}, {7, 33, 5}, {320, 256, 1024}, {64, 1280, 256}}) {
        const at::Tensor rows = at::randn({m, k});
        const at::Tensor weight = at::randn({n, k});
        const at::Tensor bias = at::randn({n});
        expect_close(linear_rows(rows, weight), at::mm(rows, weight.t()), 1e-4);
        expect_close(linear_rows(rows, weight, bias), at::addmm(bias, rows, weight.t()), 1e-4);
        // A transposed view: rows · W, the input gradient's product.
        const at::Tensor g = at::randn({m, n});
        expect_close(linear_rows(g, weight.t()), at::mm(g, weight), 1e-4);
        // Strided rows (a narrowed column range).
        const at::Tensor wide = at::randn({m, k + 3});
        expect_close(linear_rows(wide.narrow(1, 2, k), weight),
                     at::mm(wide.narrow(1, 2, k).contiguous(), weight.t()), 1e-4);
    }
}

TEST(HostMatmul, AMismatchIsTorchsOwnShapeError) {
    torch::NoGradGuard no_grad;
    EXPECT_THROW(linear_rows(at::randn({3, 4}), at::randn({5, 6})), c10::Error);
}

TEST(HostMatmul, FrozenLinearForwardAndInputGradientAreAtLinears) {
    at::manual_seed(1);
    const at::Tensor weight = at::randn({24, 16});
    const at::Tensor bias = at::randn({24});
    for (const bool with_bias : {true, false}) {
        const at::Tensor b = with_bias ? bias : at::Tensor();
        const at::Tensor x = at::randn({2, 5, 16}).requires_grad_(true);
        const at::Tensor y = frozen_linear(x, weight, b);
        const at::Tensor g = at::randn({2, 5, 24});
        y.backward(g);
        const at::Tensor x_ref = x.detach().clone().requires_grad_(true);
        const at::Tensor y_ref = at::linear(x_ref, weight, b);
        y_ref.backward(g);
        expect_close(y.detach(), y_ref.detach());
        expect_close(x.grad(), x_ref.grad());
    }
}

TEST(HostMatmul, ATrainingWeightOrAnotherDtypeGoesToAtLinear) {
    at::manual_seed(2);
    // A weight that trains gets its gradient, which only at::linear's backward gives.
    const at::Tensor weight = at::randn({6, 4}).requires_grad_(true);
    const at::Tensor x = at::randn({3, 4});
    frozen_linear(x, weight, at::Tensor()).sum().backward();
    ASSERT_TRUE(weight.grad().defined());
    expect_close(weight.grad(), at::ones({3, 6}).t().mm(x));
    // bfloat16 is not oneDNN's here: the value is at::linear's exactly.
    const at::Tensor xb = at::randn({3, 4}).to(at::kBFloat16);
    const at::Tensor wb = at::randn({6, 4}).to(at::kBFloat16);
    EXPECT_TRUE(at::equal(frozen_linear(xb, wb, at::Tensor()), at::linear(xb, wb)));
}

}  // namespace
}  // namespace loom
