// The idle expert on the host (issue 39), on the simulated device with the tiny two-expert Wan 2.2
// of tests/parity/wan_reference.py: while on, only the expert computing holds device memory, the
// one the model asks for comes in after the other left, and the predictions are those of a plain
// placement, bit for bit; it composes with the low_vram levels (a parked expert quantized and
// streamed where it lies) and turning it off brings every expert back.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "loom/device/device.h"
#include "loom/device/host_memory.h"
#include "loom/model/family.h"
#include "loom/model/loading/tensor_file.h"
#include "loom/model/wan22/wan22_family.h"
#include "loom/train/low_vram.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

class IdleExpertTest : public ::testing::Test {
  protected:
    void SetUp() override {
        const char* parity = std::getenv("LOOM_PARITY_DIR");
        if (parity == nullptr || !fs::exists(fs::path(parity) / "wan22" / "pipeline")) {
            GTEST_SKIP() << "LOOM_PARITY_DIR has no tiny Wan 2.2 (tests/parity/make_reference.py)";
        }
        folder_ = fs::path(parity) / "wan22" / "pipeline";
        for (auto& [name, t] :
             read_all_tensors(fs::path(parity) / "cases" / "wan22_pipeline.inputs.safetensors")) {
            inputs_[name] = t;
        }
        device_ = open_device({DeviceKind::kSim}, std::uint64_t{1} << 30);
    }

    // The folder in host memory, its denoiser frozen as the trainer loads it.
    std::unique_ptr<ModelFamily> load() const {
        HostAllocations host;
        FamilyLoadOptions o;
        o.trained_experts = {true, true};
        std::unique_ptr<ModelFamily> family = load_model_family(folder_, o);
        for (auto& p : family->denoiser().parameters()) p.requires_grad_(false);
        return family;
    }

    // The family's prediction for the case's clips, all at timestep `t`, as float32 on the host.
    at::Tensor predict(ModelFamily& family, double t, at::ScalarType dtype = at::kFloat) const {
        const at::Tensor clip = inputs_.at("hidden_states");
        StepConditioning c;
        c.context = device_->to_device(inputs_.at("encoder_hidden_states").to(dtype));
        torch::NoGradGuard no_grad;
        // to_host, not cpu(): on the simulated device a device tensor is a counted CPU tensor.
        return device_->to_host(
            family.predict(device_->to_device(clip.to(dtype)), at::full({clip.size(0)}, t), c)
                .to(at::kFloat));
    }

    std::uint64_t allocated() const { return device_->stats().allocated; }

    fs::path folder_;
    std::map<std::string, at::Tensor> inputs_;
    std::unique_ptr<Device> device_;
};

constexpr double kHigh = 950;  // above the tiny folder's boundary (875)
constexpr double kLow = 300;

TEST_F(IdleExpertTest, OnlyTheExpertComputingHoldsDeviceMemoryAndPredictsTheSame) {
    std::uint64_t both = 0;
    at::Tensor high, low;
    {
        std::unique_ptr<ModelFamily> plain = load();
        LowVramMode mode(*plain, *device_);
        mode.place_model(0);
        both = allocated();
        high = predict(*plain, kHigh);
        low = predict(*plain, kLow);
    }
    ASSERT_EQ(allocated(), 0u);
    std::unique_ptr<ModelFamily> family = load();
    LowVramMode mode(*family, *device_);
    mode.set_idle_expert_on_host(true);  // before placement: the idle expert never comes
    mode.place_model(0);
    const std::uint64_t one = allocated();
    EXPECT_LT(one, both);
    // The two experts are of one config: each holds half of what both held (the small rest is
    // the encoders and the VAE).
    EXPECT_GT(one, both / 2);
    EXPECT_TRUE(torch::equal(predict(*family, kLow), low));  // the low-noise expert comes in
    EXPECT_EQ(allocated(), one);
    EXPECT_TRUE(torch::equal(predict(*family, kHigh), high));
    EXPECT_EQ(allocated(), one);
    // A batch on both sides of the boundary: both on the device until the next single one.
    StepConditioning c;
    c.context = inputs_.at("encoder_hidden_states");
    family->predict(inputs_.at("hidden_states"), inputs_.at("timestep"), c);
    EXPECT_EQ(allocated(), both);
    predict(*family, kLow);
    EXPECT_EQ(allocated(), one);
    mode.set_idle_expert_on_host(false);
    EXPECT_EQ(allocated(), both);
    EXPECT_TRUE(torch::equal(predict(*family, kHigh), high));
}

// The levels act on the parked expert where it lies: quantized on the host (the device never sees
// its float32 weights), its block weights streamed and, back at level 2, left on the host; each
// prediction equal to the same level's without the idle expert on the host.
TEST_F(IdleExpertTest, TheLevelsActOnTheParkedExpertWhereItLies) {
    std::map<int, std::pair<at::Tensor, at::Tensor>> plain_outputs;  // level: high, low
    std::map<int, std::uint64_t> plain_bytes;
    {
        std::unique_ptr<ModelFamily> plain = load();
        LowVramMode mode(*plain, *device_);
        mode.place_model(1);
        for (int level : {2, 3}) {
            mode.set_level(level);
            plain_bytes[level] = allocated();
            plain_outputs[level] = {predict(*plain, kHigh, at::kBFloat16),
                                    predict(*plain, kLow, at::kBFloat16)};
        }
    }
    std::unique_ptr<ModelFamily> family = load();
    LowVramMode mode(*family, *device_);
    mode.place_model(1);
    const std::uint64_t at_one = allocated();
    mode.set_idle_expert_on_host(true);
    EXPECT_LT(allocated(), at_one);
    const std::uint64_t before = device_->stats().peak_allocated;
    mode.set_level(2);
    EXPECT_LE(device_->stats().peak_allocated, before);  // the parked float32 never came
    EXPECT_LT(allocated(), plain_bytes[2]);
    for (int level : {2, 3}) {
        if (level == 3) mode.set_level(3);
        EXPECT_TRUE(
            torch::equal(predict(*family, kHigh, at::kBFloat16), plain_outputs[level].first))
            << level;
        EXPECT_TRUE(
            torch::equal(predict(*family, kLow, at::kBFloat16), plain_outputs[level].second))
            << level;
    }
    const std::uint64_t streaming = allocated();
    mode.set_level(2);  // the parked expert's streamed weights stay on the host
    EXPECT_LT(allocated(), plain_bytes[2]);
    EXPECT_GT(allocated(), streaming);
    EXPECT_TRUE(torch::equal(predict(*family, kHigh, at::kBFloat16), plain_outputs[2].first));
    mode.set_idle_expert_on_host(false);
    EXPECT_EQ(allocated(), plain_bytes[2]);
    EXPECT_TRUE(torch::equal(predict(*family, kLow, at::kBFloat16), plain_outputs[2].second));
}

}  // namespace
}  // namespace loom
