// Flow matching against diffusers' FlowMatchEulerDiscreteScheduler as the Flux pipeline drives
// it, and against ai-toolkit's training timesteps and noising (label `parity`), within 1e-6.
// References come from tests/parity/flux_reference.py.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "loom/core/error.h"
#include "loom/model/loading/tensor_file.h"
#include "loom/model/schedules/flow_match.h"

namespace loom {
namespace {

class FlowMatchParity : public ::testing::Test {
  protected:
    void SetUp() override {
        const char* dir = std::getenv("LOOM_PARITY_DIR");
        ASSERT_NE(dir, nullptr) << "LOOM_PARITY_DIR must point at make_reference.py's output";
        for (auto& [name, t] :
             read_all_tensors(std::filesystem::path(dir) / "cases" / "flow_match.safetensors")) {
            ref_[name] = t;
        }
    }
    const at::Tensor& ref(const std::string& name) {
        auto it = ref_.find(name);
        EXPECT_NE(it, ref_.end()) << name;
        return it->second;
    }
    static double max_error(const at::Tensor& a, const at::Tensor& b) {
        EXPECT_EQ(a.sizes(), b.sizes());
        return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
    }
    static std::map<std::string, FlowMatchConfig> configs() {
        FlowMatchConfig dev;  // FLUX.1-dev's scheduler_config.json
        dev.shift = 3.0;
        dev.use_dynamic_shifting = true;
        FlowMatchConfig schnell;
        schnell.shift = 1.0;
        FlowMatchConfig static3;
        static3.shift = 3.0;
        return {{"dev", dev}, {"schnell", schnell}, {"static3", static3}};
    }
    std::map<std::string, at::Tensor> ref_;
};

TEST_F(FlowMatchParity, PreviewSigmasAndTimestepsAsTheFluxPipeline) {
    for (const auto& [name, config] : configs()) {
        for (const auto& [steps, seq] : {std::pair{4, 24}, {28, 4096}, {20, 1024}}) {
            const std::string key = name + "_" + std::to_string(steps) + "_" + std::to_string(seq);
            SCOPED_TRACE(key);
            const FlowMatchEulerSampler sampler(config, steps, seq);
            EXPECT_LE(max_error(sampler.sigmas(), ref(key + "_sigmas")), 1e-6);
            EXPECT_LE(max_error(sampler.timesteps() / 1000, ref(key + "_timesteps") / 1000), 1e-6);
        }
    }
}

// WanPipeline calls set_timesteps(steps) without sigmas: the scheduler spaces them itself.
TEST_F(FlowMatchParity, SchedulerSpacedSigmasAsWanPipelineGetsThem) {
    for (const double shift : {3.0, 5.0}) {
        for (const int64_t steps : {2, 4, 30, 50}) {
            const std::string key =
                "spaced_" + std::to_string(static_cast<int>(shift)) + "_" + std::to_string(steps);
            SCOPED_TRACE(key);
            FlowMatchConfig config;
            config.shift = shift;
            const auto sampler = FlowMatchEulerSampler::scheduler_spaced(config, steps);
            ASSERT_EQ(sampler.steps(), steps);
            EXPECT_LE(max_error(sampler.sigmas(), ref(key + "_sigmas")), 1e-7);
            EXPECT_LE(max_error(sampler.timesteps(), ref(key + "_timesteps")), 1e-4);
        }
    }
    FlowMatchConfig dynamic;
    dynamic.use_dynamic_shifting = true;
    EXPECT_THROW(FlowMatchEulerSampler::scheduler_spaced(dynamic, 4), Error);
}

TEST_F(FlowMatchParity, EulerStepsAsTheScheduler) {
    for (const auto& [name, config] : configs()) {
        SCOPED_TRACE(name);
        const std::string key = name + "_4_24";
        const FlowMatchEulerSampler sampler(config, 4, 24);
        at::Tensor x = ref(key + "_start");
        const at::Tensor expected = ref(key + "_samples");
        for (int64_t i = 0; i < sampler.steps(); ++i) {
            x = sampler.step(ref(key + "_output_" + std::to_string(i)), i, x);
            EXPECT_LE(max_error(x, expected[i]), 1e-6) << "step " << i;
        }
    }
}

TEST_F(FlowMatchParity, TrainingTimestepTablesAsAiToolkit) {
    at::Generator g = at::detail::createCPUGenerator(1);
    for (const auto& [name, config] : configs()) {
        SCOPED_TRACE(name);
        for (const int64_t seq : {24, 4096}) {
            const at::Tensor table =
                flow_match_train_timesteps(FlowTimestepType::shift, config, seq, g);
            // As sigmas (timesteps / 1000), where the 1e-6 applies.
            EXPECT_LE(
                max_error(table / 1000, ref(name + "_train_shift_" + std::to_string(seq)) / 1000),
                1e-6);
        }
    }
    const at::Tensor linear =
        flow_match_train_timesteps(FlowTimestepType::linear, configs()["dev"], 24, g);
    EXPECT_LE(max_error(linear / 1000, ref("train_linear") / 1000), 1e-6);
}

TEST_F(FlowMatchParity, NoisingAndTargetAsAiToolkit) {
    EXPECT_LE(max_error(flow_match_add_noise(ref("x0"), ref("noise"), ref("t")), ref("noisy")),
              1e-6);
    EXPECT_TRUE(torch::equal(flow_match_target(ref("x0"), ref("noise")), ref("target")));
}

}  // namespace
}  // namespace loom
