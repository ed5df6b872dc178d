// Gradient checkpointing: same gradients as a plain backward (1e-5), LoRA-style adapters on a
// frozen base get theirs, dropout masks are replayed, and the sim device measures a peak cut.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "loom/device/device.h"
#include "loom/model/nn/checkpoint.h"
#include "loom/model/sd/unet_2d_condition.h"
#include "tiny_models.h"

namespace loom {
namespace {

// A low-rank adapter like the LoRA layer of the next issue, with optional dropout on its input.
class TestAdapter : public LayerAdapter {
  public:
    TestAdapter(int64_t in, int64_t out, double dropout) : dropout_(dropout) {
        down = torch::randn({4, in}) * 0.1;
        up = torch::randn({out, 4}) * 0.1;
        down.requires_grad_(true);
        up.requires_grad_(true);
    }
    at::Tensor forward(const at::Tensor& x) override {
        const at::Tensor in = dropout_ > 0 ? at::dropout(x, dropout_, /*train=*/true) : x;
        return at::linear(at::linear(in, down), up);
    }
    at::Tensor down;
    at::Tensor up;

  private:
    double dropout_;
};

struct StepResult {
    at::Tensor output;
    std::vector<at::Tensor> grads;
};

class CheckpointTest : public ::testing::Test {
  protected:
    void SetUp() override {
        torch::manual_seed(0);
        unet = UNet2DConditionModel(testing::tiny_unet_config());
        for (auto& p : unet->parameters()) p.requires_grad_(false);  // frozen base
        for (const auto& item : unet->named_modules()) {
            auto linear = std::dynamic_pointer_cast<LinearImpl>(item.value());
            const std::string& name = item.key();
            if (linear && (name.find("to_q") != std::string::npos ||
                           name.find("ff.net.2") != std::string::npos)) {
                auto a = std::make_shared<TestAdapter>(linear->in_features(),
                                                       linear->out_features(), dropout);
                linear->set_adapter(a);
                adapters.push_back(a);
            }
        }
        ASSERT_EQ(adapters.size(), 18u);  // 6 transformers x (to_q of attn1 and attn2, ff.net.2)
        torch::manual_seed(1);
        sample = torch::randn({2, 4, 16, 16});
        context = torch::randn({2, 7, 32});
    }

    StepResult step(bool checkpointing) {
        unet->set_gradient_checkpointing(checkpointing);
        for (auto& a : adapters) {
            a->down.mutable_grad() = at::Tensor();
            a->up.mutable_grad() = at::Tensor();
        }
        torch::manual_seed(123);  // same dropout masks for both runs
        StepResult r;
        r.output = unet->forward(sample, torch::tensor({10, 700}), context);
        r.output.pow(2).mean().backward();
        for (auto& a : adapters) {
            r.grads.push_back(a->down.grad());
            r.grads.push_back(a->up.grad());
        }
        return r;
    }

    double dropout = 0.0;
    UNet2DConditionModel unet{nullptr};
    std::vector<std::shared_ptr<TestAdapter>> adapters;
    at::Tensor sample;
    at::Tensor context;
};

void expect_same(const StepResult& plain, const StepResult& ckpt) {
    EXPECT_LE((plain.output - ckpt.output).abs().max().item<double>(), 1e-5);
    ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
    for (std::size_t i = 0; i < plain.grads.size(); ++i) {
        ASSERT_TRUE(plain.grads[i].defined()) << "adapter tensor " << i << " got no gradient";
        ASSERT_TRUE(ckpt.grads[i].defined()) << "adapter tensor " << i << " got no gradient";
        EXPECT_GT(plain.grads[i].abs().sum().item<double>(), 0.0);
        EXPECT_LE((plain.grads[i] - ckpt.grads[i]).abs().max().item<double>(), 1e-5) << i;
    }
}

TEST_F(CheckpointTest, AdapterGradientsMatchWithAFrozenBase) {
    const StepResult plain = step(false);
    const StepResult ckpt = step(true);
    expect_same(plain, ckpt);
}

class CheckpointDropoutTest : public CheckpointTest {
  protected:
    void SetUp() override {
        dropout = 0.3;
        CheckpointTest::SetUp();
    }
};

TEST_F(CheckpointDropoutTest, RecomputeReplaysTheDropoutMasks) {
    const StepResult plain = step(false);
    const StepResult ckpt = step(true);
    expect_same(plain, ckpt);
}

TEST(Checkpoint, PlainWhenGradIsOff) {
    int calls = 0;
    torch::NoGradGuard no_grad;
    const auto out = checkpoint(
        [&](const std::vector<at::Tensor>& in) {
            ++calls;
            return std::vector<at::Tensor>{in[0] * 2};
        },
        {torch::ones({2})});
    EXPECT_EQ(calls, 1);
    EXPECT_FALSE(out[0].requires_grad());
}

TEST(Checkpoint, UndefinedInputsPassThrough) {
    const at::Tensor w = torch::ones({3}, torch::requires_grad());
    const auto out = checkpoint(
        [&](const std::vector<at::Tensor>& in) {
            EXPECT_FALSE(in[1].defined());
            return std::vector<at::Tensor>{in[0] * w};
        },
        {torch::ones({3}), at::Tensor()});
    out[0].sum().backward();
    EXPECT_TRUE(torch::equal(w.grad(), torch::ones({3})));
}

TEST(CheckpointMemory, CutsThePeakOnTheSimDevice) {
    // A UNet forward+backward at 64x64 latents on the simulated device, with and without
    // checkpointing: the budgeted allocator measures each peak exactly.
    torch::manual_seed(0);
    UNet2DConditionModel unet(testing::tiny_unet_config());
    auto device = open_device({DeviceKind::kSim}, 4ull << 30);
    const at::Tensor sample = torch::randn({1, 4, 64, 64});
    const at::Tensor context = torch::randn({1, 77, 32});
    std::uint64_t peaks[2] = {0, 0};
    for (int ckpt = 0; ckpt < 2; ++ckpt) {
        unet->set_gradient_checkpointing(ckpt == 1);
        unet->zero_grad(true);
        device->reset_peak();
        const std::uint64_t base = device->stats().allocated;
        unet->forward(sample, torch::tensor({500}), context).pow(2).mean().backward();
        peaks[ckpt] = device->stats().peak_allocated - base;
        unet->zero_grad(true);
    }
    EXPECT_LT(peaks[1], peaks[0]);
    RecordProperty("peak_plain_bytes", std::to_string(peaks[0]));
    RecordProperty("peak_checkpointed_bytes", std::to_string(peaks[1]));
}

}  // namespace
}  // namespace loom
