// Every optimizer loom offers (train.optimizer: adamw, adamw8bit, prodigy) behind one interface:
// all or nothing under an OOM, an exact continuation from its saved state, a state of another
// optimizer refused, and the state's size. Their math against the Python references is in
// test_optimizer_parity.cpp.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "loom/config/job.h"
#include "loom/core/error.h"
#include "loom/device/device.h"
#include "loom/train/adamw_8bit.h"
#include "loom/train/optimizer.h"

namespace loom {
namespace {

// A LoRA-like set: a down (8-bit state under adamw8bit), a zero up (Prodigy keeps one zero for
// its p0) and a small tensor (float32 state under adamw8bit).
std::vector<at::Tensor> lora_like_params() {
    torch::manual_seed(0);
    return {(torch::randn({16, 320}) * 0.02).requires_grad_(true),
            torch::zeros({320, 16}).requires_grad_(true),
            (torch::randn({4, 32}) * 0.02).requires_grad_(true)};
}

void set_small_grads(const std::vector<at::Tensor>& params, int step) {
    torch::manual_seed(100 + step);
    for (const auto& p : params) p.mutable_grad() = torch::randn(p.sizes()) * 1e-3;
}

std::unique_ptr<Optimizer> make(const std::string& name, std::vector<at::Tensor> params) {
    config::TrainConfig t;
    t.optimizer = name;
    return make_optimizer(t, std::move(params), false);
}

std::vector<at::Tensor> copies(const std::vector<at::Tensor>& tensors) {
    std::vector<at::Tensor> out;
    for (const auto& t : tensors) out.push_back(t.detach().clone());
    return out;
}

bool same(const OptimizerState& a, const OptimizerState& b) {
    if (a.kind != b.kind || a.steps != b.steps || a.scalars != b.scalars) return false;
    for (const auto& [name, list] : a.lists) {
        const auto& other = b.lists.at(name);
        for (std::size_t i = 0; i < list.size(); ++i) {
            if (!torch::equal(list[i], other[i])) return false;
        }
    }
    return true;
}

class Optimizers : public ::testing::TestWithParam<std::string> {};

TEST_P(Optimizers, AnOomInsideStepChangesNothing) {
    auto params = lora_like_params();
    auto opt = make(GetParam(), params);
    set_small_grads(params, 0);
    opt->step(1e-3);  // a state that is not all zeros
    set_small_grads(params, 1);
    const auto before = copies(params);
    const OptimizerState state_before = opt->state();
    {
        // A budget the first parameter's temporaries fit in, then it runs out.
        auto device = open_device({DeviceKind::kSim}, 40000);
        EXPECT_THROW(opt->step(1e-3), c10::OutOfMemoryError);
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
        EXPECT_TRUE(torch::equal(params[i], before[i])) << i;
    }
    EXPECT_TRUE(same(opt->state(), state_before));
    opt->step(1e-3);  // the retry succeeds and moves the weights
    EXPECT_FALSE(torch::equal(params[0], before[0]));
    EXPECT_EQ(opt->steps_taken(), 2);
}

TEST_P(Optimizers, ContinuesExactlyFromItsSavedState) {
    auto straight = lora_like_params();
    auto opt = make(GetParam(), straight);
    auto resumed = lora_like_params();
    auto first = make(GetParam(), resumed);
    for (int k = 0; k < 3; ++k) {
        set_small_grads(straight, k);
        opt->step(1e-3);
        set_small_grads(resumed, k);
        first->step(1e-3);
    }
    // A new process: fresh optimizer, the weights and the state of the checkpoint.
    const OptimizerState saved = first->state();
    auto weights = copies(resumed);
    auto params = lora_like_params();
    for (std::size_t i = 0; i < params.size(); ++i) params[i].detach().copy_(weights[i]);
    auto second = make(GetParam(), params);
    second->load_state(saved);
    EXPECT_EQ(second->steps_taken(), 3);
    for (int k = 3; k < 6; ++k) {
        set_small_grads(straight, k);
        opt->step(1e-3);
        set_small_grads(params, k);
        second->step(1e-3);
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
        EXPECT_TRUE(torch::equal(params[i], straight[i])) << i;
    }
}

TEST_P(Optimizers, AnotherOptimizersStateIsRefused) {
    auto params = lora_like_params();
    auto opt = make(GetParam(), params);
    const std::string other = GetParam() == "prodigy" ? "adamw" : "prodigy";
    auto foreign = make(other, lora_like_params());
    try {
        opt->load_state(foreign->state());
        FAIL() << "loaded " << other << "'s state";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("train.optimizer changed"), std::string::npos)
            << e.what();
    }
}

INSTANTIATE_TEST_SUITE_P(Each, Optimizers, ::testing::Values("adamw", "adamw8bit", "prodigy"));

TEST(OptimizerState, BytesPerParameterAsTheirReferencesKeepThem) {
    auto params = lora_like_params();
    const double big = 2.0 * 16 * 320;  // the down and the up
    const double small = 4 * 32;
    // AdamW: two float32 moments.
    EXPECT_EQ(make("adamw", params)->state_bytes(), static_cast<std::uint64_t>(8 * (big + small)));
    // 8-bit AdamW: one byte per moment plus a float32 maximum per 256 for the large tensors
    // (5120 elements: 20 blocks), float32 moments (and one unused maximum each) for the small.
    const std::uint64_t eight_bit = 2 * (2 * 5120 + 2 * 20 * 4) + 8 * 128 + 2 * 4;
    EXPECT_EQ(make("adamw8bit", params)->state_bytes(), eight_bit);
    // Prodigy: moments, s and p0 (a zero-initialised tensor keeps one zero as its p0).
    EXPECT_EQ(make("prodigy", params)->state_bytes(),
              static_cast<std::uint64_t>(16 * 5120 + 12 * 5120 + 4 + 16 * 128));
}

TEST(AdamW8bit, QuantizationRoundTripsWithinTheMapsSpacingAndZeroBlocksStayZero) {
    torch::manual_seed(3);
    at::Tensor x = torch::randn({1000}) * 1e-3;
    x.narrow(0, 256, 256).zero_();
    const auto [codes, absmax] = quantize_blockwise(x, dynamic_map(true), 256);
    ASSERT_EQ(absmax.numel(), 4);
    EXPECT_EQ(absmax[1].item<float>(), 0.0f);
    EXPECT_TRUE(torch::equal(codes.narrow(0, 256, 256), torch::zeros({256}, torch::kByte)));
    const at::Tensor back = dequantize_blockwise(codes, absmax, dynamic_map(true), 256);
    EXPECT_TRUE(torch::equal(back.narrow(0, 256, 256), torch::zeros({256})));
    // The dynamic map is finest near zero; relative to each block's maximum the error stays
    // below the widest gap between codes (~0.0078 near 1).
    for (int b : {0, 2, 3}) {
        const int64_t n = std::min<int64_t>(256, 1000 - b * 256);
        const at::Tensor err = (back.narrow(0, b * 256, n) - x.narrow(0, b * 256, n)).abs();
        EXPECT_LT(err.max().item<double>() / absmax[b].item<double>(), 0.008) << b;
    }
    // The maps: bitsandbytes' shape.
    const at::Tensor& s = dynamic_map(true);
    EXPECT_EQ(s[127].item<float>(), 0.0f);
    EXPECT_EQ(s[255].item<float>(), 1.0f);
    EXPECT_NEAR(s[0].item<float>(), -0.99296874f, 1e-7);
    EXPECT_EQ(dynamic_map(false)[0].item<float>(), 0.0f);
}

}  // namespace
}  // namespace loom
