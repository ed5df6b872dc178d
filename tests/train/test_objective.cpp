// The training objective without a UNet: timestep shaping, per-slot draws that do not depend on
// how a step is cut into micro-batches, the noise offset, the target and the loss.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "loom/device/device.h"
#include "loom/train/objective.h"

namespace loom {
namespace {

using config::LossType;
using config::TimestepBias;

TEST(Objective, TimestepShapingStaysInRangeAndLeansAsAsked) {
    EXPECT_EQ(shaped_timestep(0.0, 0, 999, TimestepBias::kBalanced), 0);
    EXPECT_EQ(shaped_timestep(0.999999, 0, 999, TimestepBias::kBalanced), 999);
    EXPECT_EQ(shaped_timestep(0.5, 0, 999, TimestepBias::kBalanced), 500);
    // content: u³ — half-way draws land early; style: 1 − u³ — they land late.
    EXPECT_EQ(shaped_timestep(0.5, 0, 999, TimestepBias::kContent), 125);
    EXPECT_EQ(shaped_timestep(0.5, 0, 999, TimestepBias::kStyle), 875);
    EXPECT_EQ(shaped_timestep(0.0, 100, 200, TimestepBias::kStyle), 200);  // clamped to hi
    EXPECT_EQ(shaped_timestep(0.0, 100, 200, TimestepBias::kContent), 100);
}

TEST(Objective, ASlotDrawsTheSameInAnyMicroBatch) {
    const auto device = open_device(DeviceSpec{DeviceKind::kCpu});
    const DiffusionObjective objective({}, NoiseSchedule{});
    const at::Tensor x0 = torch::randn({3, 4, 8, 8});
    const NoisedBatch together = objective.noise(x0, {0, 1, 2}, 7, 4, *device);
    const NoisedBatch alone = objective.noise(x0.slice(0, 2, 3), {2}, 7, 4, *device);
    EXPECT_TRUE(torch::equal(together.noise[2], alone.noise[0]));
    EXPECT_EQ(together.slot_timesteps[2], alone.slot_timesteps[0]);
    EXPECT_TRUE(torch::allclose(together.noisy[2], alone.noisy[0]));
    // Another step or another seed draws something else.
    const NoisedBatch next_step = objective.noise(x0.slice(0, 2, 3), {2}, 7, 5, *device);
    EXPECT_FALSE(torch::equal(next_step.noise[0], alone.noise[0]));
    const NoisedBatch other_seed = objective.noise(x0.slice(0, 2, 3), {2}, 8, 4, *device);
    EXPECT_FALSE(torch::equal(other_seed.noise[0], alone.noise[0]));
    for (double t : together.slot_timesteps) {
        EXPECT_GE(t, 0);
        EXPECT_LE(t, 999);
    }
    // epsilon prediction: the target is the noise itself.
    EXPECT_TRUE(torch::equal(together.target, together.noise));
}

// Flow matching (Flux): x_t = (1 - t/1000) x0 + (t/1000) noise, target noise - x0, float
// timesteps from ai-toolkit's table for the type — per slot, as DDPM's draws are.
TEST(Objective, FlowMatchingNoisesLinearlyAndTargetsTheVelocity) {
    const auto device = open_device(DeviceSpec{DeviceKind::kCpu});
    ObjectiveOptions options;
    options.timestep_type = FlowTimestepType::sigmoid;
    const DiffusionObjective objective(options, FlowMatchConfig{});
    EXPECT_TRUE(objective.flow_matching());
    const at::Tensor x0 = torch::randn({3, 16, 8, 8});
    const NoisedBatch b = objective.noise(x0, {0, 1, 2}, 9, 2, *device);
    EXPECT_EQ(b.timesteps.scalar_type(), at::kFloat);
    for (std::int64_t i = 0; i < 3; ++i) {
        const double t = b.timesteps[i].item<double>() / 1000.0;
        EXPECT_GT(t, 0.0);
        EXPECT_LE(t, 1.0);
        EXPECT_TRUE(torch::allclose(b.noisy[i], (1 - t) * x0[i] + t * b.noise[i], 1e-5, 1e-5));
    }
    EXPECT_TRUE(torch::allclose(b.target, b.noise - x0));
    const NoisedBatch alone = objective.noise(x0.slice(0, 1, 2), {1}, 9, 2, *device);
    EXPECT_TRUE(torch::equal(alone.noise[0], b.noise[1]));
    EXPECT_EQ(alone.slot_timesteps[0], b.slot_timesteps[1]);
    // The type shapes the draws: linear spreads them evenly, sigmoid gathers them mid-way.
    auto mean_distance_from_middle = [&](FlowTimestepType type) {
        ObjectiveOptions o;
        o.timestep_type = type;
        const DiffusionObjective obj(o, FlowMatchConfig{});
        std::vector<std::size_t> slots(256);
        for (std::size_t i = 0; i < slots.size(); ++i) slots[i] = i;
        const NoisedBatch many = obj.noise(torch::zeros({256, 16, 2, 2}), slots, 1, 0, *device);
        return (many.timesteps - 500).abs().mean().item<double>();
    };
    EXPECT_LT(mean_distance_from_middle(FlowTimestepType::sigmoid),
              mean_distance_from_middle(FlowTimestepType::linear) - 50);
}

// A clip [B, C, F, h, w]: one offset per channel over every frame and pixel, not per frame.
TEST(Objective, NoiseOffsetOfAClipIsPerChannelAcrossFrames) {
    const auto device = open_device(DeviceSpec{DeviceKind::kCpu});
    ObjectiveOptions options;
    options.noise_offset = 0.1;
    const DiffusionObjective objective(options, FlowMatchConfig{});
    const at::Tensor x0 = torch::zeros({2, 4, 3, 8, 8});
    const NoisedBatch b = objective.noise(x0, {0, 1}, 3, 0, *device);
    ASSERT_EQ(b.slot_offsets.size(), 2u);
    EXPECT_EQ(b.slot_offsets[0].sizes(), (std::vector<int64_t>{4, 1, 1, 1}));
    const at::Tensor added = b.noise - torch::stack(b.slot_noise);
    ASSERT_EQ(added.sizes(), x0.sizes());
    // Channel c gets one value everywhere, and channels differ.
    EXPECT_TRUE(torch::allclose(
        added, added.narrow(2, 0, 1).narrow(3, 0, 1).narrow(4, 0, 1).expand_as(added), 1e-6, 1e-6));
    EXPECT_GT((added[0][0][0][0][0] - added[0][1][0][0][0]).abs().item<float>(), 0.0f);
}

TEST(Objective, NoiseOffsetAddsOneConstantPerChannel) {
    const auto device = open_device(DeviceSpec{DeviceKind::kCpu});
    ObjectiveOptions options;
    options.noise_offset = 0.1;
    const DiffusionObjective objective(options, NoiseSchedule{});
    const at::Tensor x0 = torch::zeros({2, 4, 8, 8});
    const NoisedBatch b = objective.noise(x0, {0, 1}, 3, 0, *device);
    ASSERT_EQ(b.slot_offsets.size(), 2u);
    const at::Tensor added = b.noise - torch::stack(b.slot_noise);  // [2, 4, 8, 8]
    const at::Tensor expected = 0.1 * torch::stack(b.slot_offsets).expand_as(added);
    EXPECT_TRUE(torch::allclose(added, expected, 1e-6, 1e-6));
    EXPECT_GT(added.abs().max().item<float>(), 0.0f);
    // Without an offset nothing is added, and the plain draws are unchanged by the option.
    const NoisedBatch plain =
        DiffusionObjective({}, NoiseSchedule{}).noise(x0, {0, 1}, 3, 0, *device);
    EXPECT_TRUE(plain.slot_offsets.empty());
    EXPECT_TRUE(torch::equal(plain.noise, torch::stack(b.slot_noise)));
}

// Wan 2.2's experts: one trains switch_every micro-batches of the job's batch, then the next,
// counted from the first step; a slot keeps its expert however the plan splits the step.
TEST(Objective, ExpertTurnsFollowTheJobsMicroBatches) {
    ObjectiveOptions o;
    o.switch_every = 2;
    o.job_batch = 2;
    o.job_accumulation = 2;  // steps of 4 slots: micro-batches {0, 1} and {2, 3}
    std::vector<std::size_t> turns;
    for (std::int64_t step = 0; step < 3; ++step) {
        for (std::size_t slot = 0; slot < 4; slot += 2)
            turns.push_back(expert_turn(step, slot, o, 2));
    }
    EXPECT_EQ(turns, (std::vector<std::size_t>{0, 0, 1, 1, 0, 0}));
    EXPECT_EQ(expert_turn(1, 3, o, 2), expert_turn(1, 2, o, 2));  // one micro-batch, one expert
    EXPECT_EQ(expert_turn(5, 0, o, 1), 0u);                       // one trained expert
    o.switch_every = 1;
    o.job_accumulation = 1;
    EXPECT_EQ(expert_turn(0, 1, o, 2), 0u);
    EXPECT_EQ(expert_turn(1, 0, o, 2), 1u);
}

TEST(Objective, EachExpertDrawsItsTimestepsInsideItsSpan) {
    const auto device = open_device(DeviceSpec{DeviceKind::kCpu});
    ObjectiveOptions o;
    o.timestep_type = FlowTimestepType::linear;
    FlowMatchConfig c;
    c.shift = 5.0;
    DiffusionObjective objective(o, c);
    objective.set_expert_cycle({{875.0, 1000.0}, {0.0, 875.0}});
    const at::Tensor x0 = torch::randn({1, 4, 1, 4, 4});
    for (std::int64_t step = 0; step < 40; ++step) {
        const double t = objective.noise(x0, {0}, 3, step, *device).slot_timesteps[0];
        if (step % 2 == 0) {
            EXPECT_GT(t, 875.0) << step;
        } else {
            EXPECT_LE(t, 875.0) << step;
        }
    }
    // A span no table entry lies in gives the nearest entry.
    at::Generator gen = at::detail::createCPUGenerator(1);
    const at::Tensor t =
        flow_match_sample_timesteps_in(FlowTimestepType::linear, c, 16, 3, gen, 1000.0, 2000.0);
    EXPECT_TRUE(at::equal(t, at::full({3}, 1000.0f)));
}

TEST(Objective, LossIsMseOrMaeInFloat32) {
    const at::Tensor pred = torch::tensor({1.0f, -2.0f, 0.5f}).to(at::kBFloat16);
    const at::Tensor target = torch::tensor({0.0f, 0.0f, 0.0f});
    ObjectiveOptions mae;
    mae.loss = LossType::kMae;
    const at::Tensor l1 = DiffusionObjective(mae, NoiseSchedule{}).loss(pred, target);
    const at::Tensor l2 = DiffusionObjective({}, NoiseSchedule{}).loss(pred, target);
    EXPECT_EQ(l1.scalar_type(), at::kFloat);
    EXPECT_NEAR(l1.item<double>(), 3.5 / 3.0, 1e-6);
    EXPECT_NEAR(l2.item<double>(), 5.25 / 3.0, 1e-6);
}

// timestep_type weighted: linear draws, each item's loss weighted by ai-toolkit's table at its
// timestep before the mean; the other types leave the loss unweighted.
TEST(Objective, WeightedTimestepsWeightEachItemsLoss) {
    const auto device = open_device(DeviceSpec{DeviceKind::kCpu});
    ObjectiveOptions o;
    o.timestep_type = FlowTimestepType::weighted;
    const DiffusionObjective weighted(o, FlowMatchConfig{});
    const at::Tensor x0 = torch::randn({2, 4, 2, 2});
    const NoisedBatch b = weighted.noise(x0, {0, 1}, 5, 3, *device);
    ASSERT_TRUE(b.loss_weights.defined());
    EXPECT_TRUE(torch::equal(b.loss_weights,
                             flow_match_timestep_weights(FlowTimestepType::weighted, b.timesteps)));
    const at::Tensor pred = torch::randn({2, 4, 2, 2});
    const at::Tensor per_item = (pred - b.target).pow(2).mean({1, 2, 3});
    EXPECT_NEAR(weighted.loss(pred, b.target, b.loss_weights).item<double>(),
                (per_item * b.loss_weights).mean().item<double>(), 1e-6);
    o.timestep_type = FlowTimestepType::linear;
    EXPECT_FALSE(DiffusionObjective(o, FlowMatchConfig{})
                     .noise(x0, {0, 1}, 5, 3, *device)
                     .loss_weights.defined());
}

TEST(Objective, OptionsComeFromTheResolvedJob) {
    config::ProcessConfig p;
    p.train.min_denoising_steps = 10;
    p.train.max_denoising_steps = 500;
    p.train.noise_offset = 0.05;
    p.choices.loss = LossType::kMae;
    p.choices.timestep_bias = TimestepBias::kStyle;
    const ObjectiveOptions o = ObjectiveOptions::from(p);
    EXPECT_EQ(o.min_timestep, 10);
    EXPECT_EQ(o.max_timestep, 500);
    EXPECT_DOUBLE_EQ(o.noise_offset, 0.05);
    EXPECT_EQ(o.loss, LossType::kMae);
    EXPECT_EQ(o.bias, TimestepBias::kStyle);
}

// ai-toolkit's max_denoising_steps: 1000 draws timesteps below 1000: the last is 999.
TEST(Objective, MaxDenoisingStepsOf1000IsTheWholeSchedule) {
    config::ProcessConfig p;
    p.train.max_denoising_steps = 1000;
    EXPECT_EQ(ObjectiveOptions::from(p).max_timestep, 999);
    p.train.max_denoising_steps = 999;
    EXPECT_EQ(ObjectiveOptions::from(p).max_timestep, 999);
}

}  // namespace
}  // namespace loom
