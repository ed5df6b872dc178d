#include "loom/train/objective.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

#include "loom/core/error.h"
#include "loom/data/rng.h"
#include "loom/device/device.h"
#include "loom/model/family.h"

namespace loom {

namespace {

// The noise offset's generator stream, apart from the slot's own (noise, timestep).
constexpr std::uint64_t kOffsetStream = 1000003;

}  // namespace

ObjectiveOptions ObjectiveOptions::from(const config::ProcessConfig& process) {
    ObjectiveOptions o;
    o.min_timestep = process.train.min_denoising_steps;
    // ai-toolkit's max_denoising_steps is an exclusive bound at 1000 (it draws below it); the
    // schedule's last timestep is 999.
    o.max_timestep = std::min(process.train.max_denoising_steps, 999);
    o.bias = process.choices.timestep_bias;
    o.noise_offset = process.train.noise_offset;
    o.loss = process.choices.loss;
    // The config layer replaced the types loom does not draw (warned) for flow-matching jobs.
    o.timestep_type =
        parse_flow_timestep_type(process.train.timestep_type).value_or(FlowTimestepType::sigmoid);
    o.switch_every = std::max(1, process.train.switch_boundary_every);
    o.job_batch =
        std::max(1, process.datasets.empty()
                        ? process.train.batch_size
                        : process.datasets.front().batch_size.value_or(process.train.batch_size));
    o.job_accumulation = std::max(1, process.train.gradient_accumulation);
    return o;
}

std::size_t expert_turn(std::int64_t step_index, std::size_t slot, const ObjectiveOptions& o,
                        std::size_t experts) {
    if (experts <= 1) return 0;
    const auto micro_batch =
        static_cast<std::uint64_t>(step_index) * static_cast<std::uint64_t>(o.job_accumulation) +
        slot / static_cast<std::size_t>(o.job_batch);
    return static_cast<std::size_t>((micro_batch / static_cast<std::uint64_t>(o.switch_every)) %
                                    experts);
}

std::int64_t shaped_timestep(double u, int lo, int hi, config::TimestepBias bias) {
    double shaped = u;
    switch (bias) {
        case config::TimestepBias::kBalanced: break;
        case config::TimestepBias::kContent: shaped = u * u * u; break;
        case config::TimestepBias::kStyle: shaped = 1.0 - u * u * u; break;
    }
    return std::min<std::int64_t>(hi, lo + static_cast<std::int64_t>(shaped * (hi - lo + 1)));
}

DiffusionObjective::DiffusionObjective(ObjectiveOptions options, NoiseSchedule schedule)
    : options_(options), schedule_(std::move(schedule)) {}

DiffusionObjective::DiffusionObjective(ObjectiveOptions options, FlowMatchConfig config)
    : options_(options), flow_(config) {}

DiffusionObjective DiffusionObjective::for_family(ObjectiveOptions options,
                                                  const ModelFamily& family) {
    DiffusionObjective objective;
    switch (family.objective_kind()) {
        case ObjectiveKind::kFlowMatch:
            objective = DiffusionObjective(options, family.flow_match());
            break;
        case ObjectiveKind::kDdpm:
            objective = DiffusionObjective(options, NoiseSchedule(family.ddpm_schedule()));
            break;
    }
    const std::vector<ExpertSpan> spans = family.expert_spans();
    const std::vector<bool> trained = family.trained_experts();
    std::vector<std::pair<double, double>> cycle;
    for (std::size_t i = 0; i < spans.size(); ++i) {
        if (i < trained.size() && trained[i]) cycle.emplace_back(spans[i].above, spans[i].upto);
    }
    objective.set_expert_cycle(std::move(cycle));
    if (!spans.empty() && !objective.flow_matching()) {
        throw Error("a denoiser of several experts trains with flow matching only");
    }
    return objective;
}

NoisedBatch DiffusionObjective::noise(const at::Tensor& x0, const std::vector<std::size_t>& slots,
                                      std::uint64_t seed, std::int64_t step_index,
                                      const Device& device) const {
    const auto step_seed = static_cast<std::uint64_t>(step_index);
    NoisedBatch b;
    for (const std::size_t slot : slots) {
        at::Generator gen = at::detail::createCPUGenerator(data::mix_seed(seed, step_seed, slot));
        b.slot_noise.push_back(at::randn(x0.sizes().slice(1), gen, at::kFloat));
        if (flow_) {
            // ai-toolkit's table for the packed token count (2x2 patches of each frame of a
            // clip [B, C, F, h, w]), one index from it.
            const int64_t frames = x0.dim() == 5 ? x0.size(2) : 1;
            const int64_t tokens = frames * (x0.size(-2) / 2) * (x0.size(-1) / 2);
            if (expert_cycle_.empty()) {
                b.slot_timesteps.push_back(
                    flow_match_sample_timesteps(options_.timestep_type, *flow_, tokens, 1, gen)
                        .item<double>());
            } else {
                const auto& [above, upto] =
                    expert_cycle_[expert_turn(step_index, slot, options_, expert_cycle_.size())];
                b.slot_timesteps.push_back(flow_match_sample_timesteps_in(options_.timestep_type,
                                                                          *flow_, tokens, 1, gen,
                                                                          above, upto)
                                               .item<double>());
            }
        } else {
            const double u = at::rand({1}, gen, at::kDouble).item<double>();
            b.slot_timesteps.push_back(static_cast<double>(
                shaped_timestep(u, options_.min_timestep, options_.max_timestep, options_.bias)));
        }
        if (options_.noise_offset > 0) {
            at::Generator off = at::detail::createCPUGenerator(
                data::mix_seed(seed, step_seed, kOffsetStream + slot));
            // One offset per channel, over every frame and pixel.
            std::vector<int64_t> shape(static_cast<std::size_t>(x0.dim() - 1), 1);
            shape[0] = x0.size(1);
            b.slot_offsets.push_back(at::randn(shape, off, at::kFloat));
        }
    }
    b.noise = device.to_device(at::stack(b.slot_noise));
    if (!b.slot_offsets.empty()) {
        b.noise = b.noise + options_.noise_offset * device.to_device(at::stack(b.slot_offsets));
    }
    if (flow_) {
        b.timesteps = device.to_device(at::tensor(b.slot_timesteps, at::kDouble).to(at::kFloat));
        const at::Tensor weights = flow_match_timestep_weights(
            options_.timestep_type, at::tensor(b.slot_timesteps, at::kDouble));
        if (weights.defined()) b.loss_weights = device.to_device(weights);
        b.noisy = flow_match_add_noise(x0, b.noise, b.timesteps);
        b.target = flow_match_target(x0, b.noise);
        return b;
    }
    b.timesteps = device.to_device(at::tensor(b.slot_timesteps, at::kDouble).to(at::kLong));
    b.noisy = schedule_.add_noise(x0, b.noise, b.timesteps);
    b.target = schedule_.target(x0, b.noise, b.timesteps);
    return b;
}

at::Tensor DiffusionObjective::loss(const at::Tensor& prediction, const at::Tensor& target,
                                    const at::Tensor& weights) const {
    const at::Tensor error = prediction.to(at::kFloat) - target;
    at::Tensor per_element = options_.loss == config::LossType::kMae ? error.abs() : error.pow(2);
    if (weights.defined()) {
        std::vector<int64_t> shape(static_cast<std::size_t>(per_element.dim()), 1);
        shape[0] = per_element.size(0);
        per_element = per_element * weights.to(at::kFloat).view(shape);
    }
    return per_element.mean();
}

}  // namespace loom
