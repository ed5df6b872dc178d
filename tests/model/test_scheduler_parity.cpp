// Scheduler math against diffusers (label `parity`): DDPM add_noise / velocity, DDIM and Euler
// steps, all within 1e-6. References come from tests/parity/make_reference.py.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "loom/model/loading/tensor_file.h"
#include "loom/model/schedules/noise_schedule.h"

namespace loom {
namespace {

class SchedulerParity : public ::testing::Test {
  protected:
    void SetUp() override {
        const char* dir = std::getenv("LOOM_PARITY_DIR");
        ASSERT_NE(dir, nullptr) << "LOOM_PARITY_DIR must point at make_reference.py's output";
        for (auto& [name, t] :
             read_all_tensors(std::filesystem::path(dir) / "cases" / "scheduler.safetensors")) {
            ref_[name] = t;
        }
    }
    const at::Tensor& ref(const std::string& name) {
        auto it = ref_.find(name);
        EXPECT_NE(it, ref_.end()) << name;
        return it->second;
    }
    static double max_error(const at::Tensor& a, const at::Tensor& b) {
        return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
    }
    NoiseSchedule schedule(const std::string& prediction) {
        NoiseScheduleConfig c;
        c.prediction_type = prediction;
        return NoiseSchedule(c);
    }
    std::map<std::string, at::Tensor> ref_;
};

TEST_F(SchedulerParity, AlphasCumprodAddNoiseAndVelocity) {
    const NoiseSchedule s = schedule("epsilon");
    EXPECT_LE(max_error(s.alphas_cumprod(), ref("alphas_cumprod")), 1e-6);
    const at::Tensor t = ref("t");
    EXPECT_LE(max_error(s.add_noise(ref("x0"), ref("noise"), t), ref("add_noise")), 1e-6);
    EXPECT_LE(max_error(s.velocity(ref("x0"), ref("noise"), t), ref("velocity")), 1e-6);
    EXPECT_TRUE(torch::equal(s.target(ref("x0"), ref("noise"), t), ref("noise")));
    EXPECT_TRUE(torch::equal(schedule("v_prediction").target(ref("x0"), ref("noise"), t),
                             s.velocity(ref("x0"), ref("noise"), t)));
}

TEST_F(SchedulerParity, DDIMSteps) {
    for (const std::string pred : {"epsilon", "v_prediction"}) {
        SCOPED_TRACE(pred);
        const NoiseSchedule s = schedule(pred);
        const DDIMSampler ddim(s, 10);
        const at::Tensor expected_t = ref("ddim_" + pred + "_timesteps");
        ASSERT_EQ(static_cast<int64_t>(ddim.timesteps().size()), expected_t.numel());
        for (std::size_t i = 0; i < ddim.timesteps().size(); ++i) {
            EXPECT_EQ(ddim.timesteps()[i], expected_t[static_cast<int64_t>(i)].item<int64_t>());
        }
        at::Tensor x = ref("ddim_" + pred + "_start");
        const at::Tensor expected = ref("ddim_" + pred + "_samples");
        for (std::size_t i = 0; i < ddim.timesteps().size(); ++i) {
            x = ddim.step(ref("ddim_" + pred + "_model_output_" + std::to_string(i)),
                          ddim.timesteps()[i], x);
            EXPECT_LE(max_error(x, expected[static_cast<int64_t>(i)]), 1e-6) << "step " << i;
        }
    }
}

TEST_F(SchedulerParity, EulerSteps) {
    for (const std::string pred : {"epsilon", "v_prediction"}) {
        SCOPED_TRACE(pred);
        const NoiseSchedule s = schedule(pred);
        const EulerSampler euler(s, 12);
        EXPECT_LE(max_error(euler.sigmas(), ref("euler_" + pred + "_sigmas")), 1e-6);
        const at::Tensor expected_t = ref("euler_" + pred + "_timesteps");
        for (std::size_t i = 0; i < euler.timesteps().size(); ++i) {
            EXPECT_NEAR(euler.timesteps()[i], expected_t[static_cast<int64_t>(i)].item<double>(),
                        1e-4);
        }
        EXPECT_NEAR(euler.init_noise_sigma(),
                    ref("euler_" + pred + "_init_noise_sigma").item<double>(), 1e-5);
        at::Tensor x = ref("euler_" + pred + "_start");
        const at::Tensor scaled = ref("euler_" + pred + "_scaled");
        const at::Tensor expected = ref("euler_" + pred + "_samples");
        for (std::size_t i = 0; i < euler.timesteps().size(); ++i) {
            const auto k = static_cast<int64_t>(i);
            EXPECT_LE(max_error(euler.scale_model_input(x, i), scaled[k]), 1e-6) << "step " << i;
            x = euler.step(ref("euler_" + pred + "_model_output_" + std::to_string(i)), i, x);
            EXPECT_LE(max_error(x, expected[k]), 1e-6) << "step " << i;
        }
    }
}

TEST(Guidance, MixesUncondAndCond) {
    const at::Tensor u = torch::tensor({1.0f, 2.0f});
    const at::Tensor c = torch::tensor({3.0f, 0.0f});
    EXPECT_TRUE(torch::allclose(apply_guidance(u, c, 7.5), torch::tensor({16.0f, -13.0f})));
}

}  // namespace
}  // namespace loom
