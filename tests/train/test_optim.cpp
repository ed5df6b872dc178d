// The optimizer pieces of the trainer: AdamW against LibTorch's AdamW, its all-or-nothing step
// under an OOM, gradient clipping, LR schedules and EMA.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "loom/core/error.h"
#include "loom/device/device.h"
#include "loom/train/adamw.h"
#include "loom/train/ema.h"
#include "loom/train/lr_schedule.h"

namespace loom {
namespace {

std::vector<at::Tensor> make_params() {
    torch::manual_seed(0);
    return {torch::randn({4, 8}).requires_grad_(true), torch::randn({8}).requires_grad_(true)};
}

void set_grads(const std::vector<at::Tensor>& params, int step) {
    torch::manual_seed(100 + step);
    for (const auto& p : params) p.mutable_grad() = torch::randn(p.sizes());
}

TEST(AdamW, MatchesLibTorchAdamW) {
    auto mine = make_params();
    auto ref = make_params();
    AdamW opt(mine, AdamWOptions{1e-2, 0.9, 0.999, 1e-6, 0.01});
    torch::optim::AdamW torch_opt(
        ref, torch::optim::AdamWOptions(1e-2).betas({0.9, 0.999}).eps(1e-6).weight_decay(0.01));
    for (int s = 0; s < 5; ++s) {
        set_grads(mine, s);
        set_grads(ref, s);
        opt.step(1e-2);
        torch_opt.step();
    }
    for (std::size_t i = 0; i < mine.size(); ++i) {
        EXPECT_LE((mine[i] - ref[i]).abs().max().item<double>(), 1e-6);
    }
    EXPECT_EQ(opt.steps_taken(), 5);
}

// Steps where one parameter has no gradient take the per-parameter path, the others the flat
// one; the state they share must stay LibTorch's either way for the parameter that trains every
// step. (The skipping one differs by design: LibTorch counts steps per parameter for the bias
// correction, loom counts optimizer steps — one count, as its checkpoints store it.)
TEST(AdamW, MatchesLibTorchWhenAParameterSkipsSteps) {
    auto mine = make_params();
    auto ref = make_params();
    AdamW opt(mine, AdamWOptions{1e-2, 0.9, 0.999, 1e-6, 0.01});
    torch::optim::AdamW torch_opt(
        ref, torch::optim::AdamWOptions(1e-2).betas({0.9, 0.999}).eps(1e-6).weight_decay(0.01));
    for (int s = 0; s < 6; ++s) {
        set_grads(mine, s);
        set_grads(ref, s);
        if (s % 2 == 1) {
            mine[1].mutable_grad() = at::Tensor();
            ref[1].mutable_grad() = at::Tensor();
        }
        opt.step(1e-2);
        torch_opt.step();
        EXPECT_LE((mine[0] - ref[0]).abs().max().item<double>(), 1e-6) << "step " << s;
    }
}

TEST(AdamW, AnOomInsideStepChangesNothing) {
    auto params = make_params();
    AdamW opt(params, AdamWOptions{});
    set_grads(params, 0);
    std::vector<at::Tensor> before;
    for (const auto& p : params) before.push_back(p.detach().clone());
    {
        // A budget that lets the first parameter's temporaries through, then runs out.
        auto device = open_device({DeviceKind::kSim}, 300);
        EXPECT_THROW(opt.step(1e-3), c10::OutOfMemoryError);
    }
    for (std::size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], before[i]));
    EXPECT_EQ(opt.steps_taken(), 0);
    EXPECT_TRUE(torch::equal(opt.exp_avg()[0], torch::zeros({4, 8})));
    opt.step(1e-3);  // the retry succeeds and moves the weights
    EXPECT_FALSE(torch::equal(params[0], before[0]));
    EXPECT_EQ(opt.steps_taken(), 1);
}

TEST(AdamW, ZeroGradLeavesGradientsUndefined) {
    auto params = make_params();
    AdamW opt(params, AdamWOptions{});
    set_grads(params, 0);
    opt.zero_grad();
    for (const auto& p : params) EXPECT_FALSE(p.grad().defined());
}

TEST(AdamW, ClipGradNormLikeTorch) {
    auto params = make_params();
    AdamW opt(params, AdamWOptions{});
    set_grads(params, 0);
    const double total = std::sqrt(params[0].grad().pow(2).sum().item<double>() +
                                   params[1].grad().pow(2).sum().item<double>());
    EXPECT_NEAR(opt.clip_grad_norm(1.0), total, 1e-5);
    const double clipped = std::sqrt(params[0].grad().pow(2).sum().item<double>() +
                                     params[1].grad().pow(2).sum().item<double>());
    EXPECT_NEAR(clipped, 1.0, 1e-4);
}

TEST(LrSchedule, Shapes) {
    EXPECT_DOUBLE_EQ(make_lr_schedule("constant", 1e-4, 100, 0).lr_at(57), 1e-4);
    const LrSchedule warm = make_lr_schedule("constant_with_warmup", 1e-4, 100, 10);
    EXPECT_DOUBLE_EQ(warm.lr_at(0), 1e-5);
    EXPECT_DOUBLE_EQ(warm.lr_at(9), 1e-4);
    EXPECT_DOUBLE_EQ(warm.lr_at(50), 1e-4);
    const LrSchedule cosine = make_lr_schedule("cosine", 1e-4, 100, 0);
    EXPECT_DOUBLE_EQ(cosine.lr_at(0), 1e-4);
    EXPECT_NEAR(cosine.lr_at(50), 5e-5, 1e-12);
    EXPECT_NEAR(cosine.lr_at(100), 0.0, 1e-12);
    const LrSchedule linear = make_lr_schedule("linear", 1e-4, 100, 0);
    EXPECT_NEAR(linear.lr_at(25), 7.5e-5, 1e-12);
    EXPECT_THROW(make_lr_schedule("exponential", 1e-4, 100, 0), Error);
    // ai-toolkit's schedulers loom does not implement yet: the config warns "loom uses a constant
    // learning rate instead", and so it does (the run must not fail on them).
    EXPECT_DOUBLE_EQ(make_lr_schedule("cosine_with_restarts", 1e-4, 100, 0).lr_at(57), 1e-4);
    EXPECT_DOUBLE_EQ(make_lr_schedule(config::LrScheduler::kLinear, 1e-4, 100, 0).lr_at(50), 5e-5);
}

TEST(Ema, AveragesAndSwaps) {
    at::Tensor p = torch::zeros({2});
    Ema ema({p}, 0.9);
    {
        torch::NoGradGuard no_grad;
        p.fill_(1.0);
    }
    ema.update({p});
    EXPECT_TRUE(torch::allclose(ema.shadow()[0], torch::full({2}, 0.1)));
    ema.swap({p});
    EXPECT_TRUE(torch::allclose(p, torch::full({2}, 0.1)));
    ema.swap({p});
    EXPECT_TRUE(torch::allclose(p, torch::ones({2})));
}

}  // namespace
}  // namespace loom
