// Flow matching's training-side draws and errors (no reference needed): the timestep tables'
// ranges and order, reproducibility from a seed, the types loom refuses, and the sampler's
// schedule end points. Parity with diffusers and ai-toolkit is test_flow_match_parity.cpp.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "loom/core/error.h"
#include "loom/model/schedules/flow_match.h"

namespace loom {
namespace {

FlowMatchConfig dev() {
    FlowMatchConfig c;
    c.shift = 3.0;
    c.use_dynamic_shifting = true;
    return c;
}

TEST(FlowMatch, TimestepTypesAiToolkitNames) {
    EXPECT_EQ(parse_flow_timestep_type("sigmoid"), FlowTimestepType::sigmoid);
    EXPECT_EQ(parse_flow_timestep_type("linear"), FlowTimestepType::linear);
    EXPECT_EQ(parse_flow_timestep_type("flux_shift"), FlowTimestepType::shift);
    EXPECT_EQ(parse_flow_timestep_type("lognorm_blend"), FlowTimestepType::lognorm_blend);
    EXPECT_EQ(parse_flow_timestep_type("weighted"), FlowTimestepType::weighted);
    EXPECT_FALSE(parse_flow_timestep_type("one_step").has_value());
    EXPECT_FALSE(parse_flow_timestep_type("Sigmoid").has_value());
}

// weighted: the linear table, each timestep's loss weight ai-toolkit's default_weighing_scheme
// at its index (the table's first, a middle and its last entries, copied from its file).
TEST(FlowMatch, WeightedTimestepsCarryAiToolkitsWeights) {
    at::Generator g = at::detail::createCPUGenerator(1);
    FlowMatchConfig c;
    EXPECT_TRUE(at::equal(flow_match_train_timesteps(FlowTimestepType::weighted, c, 256, g),
                          flow_match_train_timesteps(FlowTimestepType::linear, c, 256, g)));
    const at::Tensor w =
        flow_match_timestep_weights(FlowTimestepType::weighted, at::tensor({1000.0, 1.0, 876.0}));
    ASSERT_EQ(w.numel(), 3);
    EXPECT_FLOAT_EQ(w[0].item<float>(), 0.905706524848938f);
    EXPECT_FLOAT_EQ(w[1].item<float>(), 0.4472601115703583f);
    EXPECT_FLOAT_EQ(w[2].item<float>(), 1.5226575136184692f);  // its peak, at index 124
    EXPECT_FALSE(
        flow_match_timestep_weights(FlowTimestepType::linear, at::tensor({500.0})).defined());
}

TEST(FlowMatch, EveryTableIsDescendingWithinTheTrainingRange) {
    at::Generator g = at::detail::createCPUGenerator(5);
    for (const auto type : {FlowTimestepType::sigmoid, FlowTimestepType::linear,
                            FlowTimestepType::shift, FlowTimestepType::lognorm_blend}) {
        const at::Tensor t = flow_match_train_timesteps(type, dev(), 1024, g);
        ASSERT_EQ(t.numel(), 1000);
        EXPECT_GE(t.min().item<float>(), 0.0f);
        EXPECT_LE(t.max().item<float>(), 1000.0f);
        EXPECT_TRUE((t.slice(0, 1) <= t.slice(0, 0, -1)).all().item<bool>());
    }
}

TEST(FlowMatch, ShiftMovesTimestepsTowardsNoiseForLargerImages) {
    at::Generator g = at::detail::createCPUGenerator(5);
    const at::Tensor small = flow_match_train_timesteps(FlowTimestepType::shift, dev(), 256, g);
    const at::Tensor large = flow_match_train_timesteps(FlowTimestepType::shift, dev(), 4096, g);
    EXPECT_GT(large.mean().item<float>(), small.mean().item<float>());
}

TEST(FlowMatch, SampledTimestepsAreReproducibleFromTheSeed) {
    at::Generator a = at::detail::createCPUGenerator(11);
    at::Generator b = at::detail::createCPUGenerator(11);
    const at::Tensor x = flow_match_sample_timesteps(FlowTimestepType::sigmoid, dev(), 64, 8, a);
    const at::Tensor y = flow_match_sample_timesteps(FlowTimestepType::sigmoid, dev(), 64, 8, b);
    ASSERT_EQ(x.numel(), 8);
    EXPECT_TRUE(torch::equal(x, y));
    const at::Tensor z = flow_match_sample_timesteps(FlowTimestepType::sigmoid, dev(), 64, 8, a);
    EXPECT_FALSE(torch::equal(x, z));
}

TEST(FlowMatch, NoiseAtTheEndsIsTheSampleAndTheNoise) {
    const at::Tensor x0 = torch::randn({2, 3, 4, 4});
    const at::Tensor noise = torch::randn({2, 3, 4, 4});
    const at::Tensor noisy = flow_match_add_noise(x0, noise, torch::tensor({0.0f, 1000.0f}));
    EXPECT_TRUE(torch::allclose(noisy[0], x0[0]));
    EXPECT_TRUE(torch::allclose(noisy[1], noise[1]));
}

TEST(FlowMatch, SamplerRunsFromPureNoiseToZero) {
    const FlowMatchEulerSampler sampler(dev(), 10, 1024);
    EXPECT_EQ(sampler.steps(), 10);
    EXPECT_FLOAT_EQ(sampler.sigmas()[0].item<float>(), 1.0f);
    EXPECT_FLOAT_EQ(sampler.sigmas()[10].item<float>(), 0.0f);
    // The velocity of a straight path from x to 0 brings x to 0 in the steps given.
    at::Tensor x = torch::ones({1, 4, 8});
    for (int64_t i = 0; i < sampler.steps(); ++i) x = sampler.step(torch::ones({1, 4, 8}), i, x);
    EXPECT_LE(x.abs().max().item<float>(), 1e-6f);
    EXPECT_THROW(FlowMatchEulerSampler(dev(), 0, 1024), Error);
    EXPECT_THROW(flow_match_shift_sigmas(torch::ones({3}), dev(), std::nullopt), Error);
}

}  // namespace
}  // namespace loom
