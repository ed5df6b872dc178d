// The host's Linear products through oneDNN (model/nn/host_matmul.h): the same values as torch's
// addmm within float32 rounding, the input gradient of a frozen layer as at::linear's, bf16/fp16
// through the float32 product rounded once, at::linear unchanged elsewhere; and the frozen
// convolutions of model/nn/host_conv.h the same way.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include "loom/device/device.h"
#include "loom/model/nn/host_conv.h"
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
    // A weight that trains in bfloat16 too: at::linear's value, and its gradient.
    const at::Tensor wb = at::randn({6, 4}).to(at::kBFloat16).requires_grad_(true);
    const at::Tensor xb = at::randn({3, 4}).to(at::kBFloat16);
    const at::Tensor yb = frozen_linear(xb, wb, at::Tensor());
    EXPECT_TRUE(at::equal(yb, at::linear(xb, wb)));
    yb.sum().backward();
    EXPECT_TRUE(wb.grad().defined());
}

TEST(HostMatmul, ReducedPrecisionOnTheHostIsTheFloat32ProductRoundedOnce) {
    at::manual_seed(3);
    for (const at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
        const at::Tensor x = at::randn({2, 40, 256}).to(dtype);
        const at::Tensor weight = (at::randn({96, 256}) * 0.1).to(dtype);
        const at::Tensor bias = at::randn({96}).to(dtype);
        const auto rounded = [&](const at::Tensor& v) {
            return at::linear(v.to(at::kFloat), weight.to(at::kFloat), bias.to(at::kFloat))
                .to(dtype);
        };
        {
            torch::NoGradGuard no_grad;
            const at::Tensor y = linear_rows(x.reshape({-1, 256}), weight, bias);
            ASSERT_EQ(y.scalar_type(), dtype);
            // One rounding of a float32 sum: within one unit in the last place of the float32
            // reference rounded the same way, whatever the summation order.
            const at::Tensor ref = rounded(x).reshape({-1, 96});
            const double ulp = dtype == at::kBFloat16 ? 1.0 / 128 : 1.0 / 1024;
            EXPECT_LE(((y.to(at::kFloat) - ref.to(at::kFloat)).abs() /
                       ref.to(at::kFloat).abs().clamp_min(1.0))
                          .max()
                          .item<double>(),
                      ulp);
        }
        // A frozen layer in training: the forward as above, the input's gradient in the same
        // dtype, both through the float32 product.
        const at::Tensor xg = x.detach().clone().requires_grad_(true);
        const at::Tensor y = frozen_linear(xg, weight, bias);
        ASSERT_EQ(y.scalar_type(), dtype);
        const at::Tensor g = at::randn({2, 40, 96}).to(dtype);
        y.backward(g);
        ASSERT_TRUE(xg.grad().defined());
        EXPECT_EQ(xg.grad().scalar_type(), dtype);
        const at::Tensor dx_ref = at::matmul(g.to(at::kFloat), weight.to(at::kFloat));
        EXPECT_LE((xg.grad().to(at::kFloat) - dx_ref).abs().max().item<double>(),
                  0.02 * dx_ref.abs().max().item<double>());
    }
}

TEST(HostMatmul, ReducedPrecisionWorkingCopiesAreHostMemoryOnSim) {
    // On sim the budget counts what a device's bf16 GEMM makes: the bf16 output, not this CPU's
    // float32 copies of the operands (four times the output here).
    auto device = open_device({DeviceKind::kSim}, 1ull << 30);
    const at::Tensor rows = at::randn({64, 512}).to(at::kBFloat16);
    const at::Tensor weight = at::randn({512, 512}).to(at::kBFloat16);
    torch::NoGradGuard no_grad;
    device->reset_peak();
    const std::uint64_t before = device->stats().allocated;
    const at::Tensor y = linear_rows(rows, weight);
    const std::uint64_t output = static_cast<std::uint64_t>(y.numel()) * 2;
    EXPECT_LE(device->stats().peak_allocated - before, output + 4096);
    EXPECT_GE(device->stats().allocated - before, output);
}

TEST(HostConv, ReducedPrecisionWithoutGradientIsTheFloat32ConvolutionRoundedOnce) {
    at::manual_seed(4);
    torch::NoGradGuard no_grad;
    for (const at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
        const at::Tensor x2 = at::randn({1, 8, 12, 10}).to(dtype);
        const at::Tensor w2 = (at::randn({6, 8, 3, 3}) * 0.2).to(dtype);
        const at::Tensor b2 = at::randn({6}).to(dtype);
        const at::Tensor y2 = frozen_conv(x2, w2, b2, {2, 1}, {1, 1}, {1, 1});
        const at::Tensor ref2 =
            at::conv2d(x2.to(at::kFloat), w2.to(at::kFloat), b2.to(at::kFloat), {2, 1}, {1, 1});
        ASSERT_EQ(y2.scalar_type(), dtype);
        EXPECT_TRUE(at::equal(y2, ref2.to(dtype)));
        const at::Tensor x3 = at::randn({1, 4, 3, 6, 6}).to(dtype);
        const at::Tensor w3 = (at::randn({5, 4, 3, 3, 3}) * 0.2).to(dtype);
        const at::Tensor y3 = frozen_conv(x3, w3, at::Tensor(), {1, 1, 1}, {0, 1, 1}, {1, 1, 1});
        const at::Tensor ref3 =
            at::conv3d(x3.to(at::kFloat), w3.to(at::kFloat), {}, {1, 1, 1}, {0, 1, 1});
        EXPECT_TRUE(at::equal(y3, ref3.to(dtype)));
    }
}

TEST(HostConv, AConvolutionAutogradRecordsOrFloat32IsTorchs) {
    at::manual_seed(5);
    const at::Tensor x = at::randn({1, 4, 8, 8}).to(at::kBFloat16).requires_grad_(true);
    const at::Tensor w = at::randn({3, 4, 3, 3}).to(at::kBFloat16);
    const at::Tensor y = frozen_conv(x, w, at::Tensor(), {1, 1}, {1, 1}, {1, 1});
    EXPECT_TRUE(at::equal(y, at::conv2d(x, w, {}, 1, 1)));
    y.sum().backward();
    EXPECT_TRUE(x.grad().defined());
    const at::Tensor xf = at::randn({1, 4, 8, 8});
    const at::Tensor wf = at::randn({3, 4, 3, 3});
    EXPECT_TRUE(at::equal(frozen_conv(xf, wf, at::Tensor(), {1, 1}, {1, 1}, {1, 1}),
                          at::conv2d(xf, wf, {}, 1, 1)));
}

}  // namespace
}  // namespace loom
