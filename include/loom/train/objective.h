#pragma once

// The training objective of a model family (ModelFamily::objective_kind): DDPM for SD (epsilon or
// v-prediction over the beta schedule), flow matching for Flux (x_t = (1 - t) x0 + t noise,
// target noise - x0, t drawn as ai-toolkit's train.timestep_type draws it) — what noise a
// training example gets, at which timestep, what the model is asked to predict, and the loss. Every
// random draw is a function of (seed, step, slot) alone, so a slot gets the same noise and timestep
// in whichever micro-batch a retry puts it (DESIGN.md "Retry semantics"), and a resumed run draws
// what the uninterrupted one would have.
//
// Unit-testable without a UNet: the draws and the loss are plain tensor math.

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "loom/config/choices.h"
#include "loom/config/job.h"
#include "loom/model/schedules/flow_match.h"
#include "loom/model/schedules/noise_schedule.h"

namespace loom {

class Device;
class ModelFamily;

struct ObjectiveOptions {
    int min_timestep = 0;    // train.min_denoising_steps
    int max_timestep = 999;  // train.max_denoising_steps (inclusive)
    config::TimestepBias bias = config::TimestepBias::kBalanced;
    double noise_offset = 0.0;  // train.noise_offset: a per-channel constant added to the noise
    config::LossType loss = config::LossType::kMse;
    // Flow matching: train.timestep_type (resolved to one loom draws for flow-matching jobs).
    FlowTimestepType timestep_type = FlowTimestepType::sigmoid;
    // A denoiser of several experts (Wan 2.2 14B): one expert trains `switch_every` micro-batches
    // of the job's own batch (`job_batch` items: the job's batch size times the ranks;
    // `job_accumulation` of them a step), then the next trained one (train.switch_boundary_every,
    // as ai-toolkit's SDTrainer counts micro-batches). The count starts at the run's first step,
    // and the job's batch, not the plan's, defines a micro-batch: a retry under batch 1 x
    // accumulation or a resumed run gives each slot the expert it had.
    int switch_every = 1;
    int job_batch = 1;
    int job_accumulation = 1;

    static ObjectiveOptions from(const config::ProcessConfig& process);
};

// The timestep for a uniform draw u in [0, 1): balanced is uniform over [lo, hi]; content
// (train.content_or_style) shapes u to u³, so low timesteps come more often; style to 1 − u³,
// so high (noisier) timesteps do.
std::int64_t shaped_timestep(double u, int lo, int hi, config::TimestepBias bias);

// Which of `experts` trained experts (in their cycle order) slot `slot` of step `step_index`
// (0-based) trains, under `options`' cadence.
std::size_t expert_turn(std::int64_t step_index, std::size_t slot, const ObjectiveOptions& options,
                        std::size_t experts);

// A micro-batch's examples: the noised latents and what the model must predict. The per-slot
// draws are kept alive with it (they are what a retry redraws identically).
struct NoisedBatch {
    std::vector<at::Tensor> slot_noise;    // [C, H, W] float32 per slot
    std::vector<at::Tensor> slot_offsets;  // [C, 1, 1] per slot, with a noise offset
    std::vector<double> slot_timesteps;
    at::Tensor noise;  // [B, C, H, W] on the device, offset included
    // [B] on the device: int64 schedule indices (DDPM), float32 t x 1000 (flow matching)
    at::Tensor timesteps;
    at::Tensor noisy;   // [B, C, H, W] the model's input
    at::Tensor target;  // [B, C, H, W] epsilon or v (DDPM's prediction type); noise - x0
    // [B] float32 on the device: each item's loss weight (timestep_type weighted), or undefined
    at::Tensor loss_weights;
};

class DiffusionObjective {
  public:
    DiffusionObjective() = default;
    // DDPM over `schedule`.
    DiffusionObjective(ObjectiveOptions options, NoiseSchedule schedule);
    // Flow matching with `config`'s shift (the shift timestep type).
    DiffusionObjective(ObjectiveOptions options, FlowMatchConfig config);
    // The family's objective.
    static DiffusionObjective for_family(ObjectiveOptions options, const ModelFamily& family);

    bool flow_matching() const { return flow_.has_value(); }
    // The trained experts' timestep spans (above, upto], in cycle order; empty for one denoiser.
    // Each slot's timestep is drawn inside the span of the expert whose turn it is
    // (expert_turn); for_family sets it from the family.
    const std::vector<std::pair<double, double>>& expert_cycle() const { return expert_cycle_; }
    void set_expert_cycle(std::vector<std::pair<double, double>> cycle) {
        expert_cycle_ = std::move(cycle);
    }

    // Noises `x0` ([B, C, H, W] on `device`): slot b of the batch is slot `slots[b]` of step
    // `step_index` (0-based) of a run seeded with `seed`.
    NoisedBatch noise(const at::Tensor& x0, const std::vector<std::size_t>& slots,
                      std::uint64_t seed, std::int64_t step_index, const Device& device) const;

    // The mean loss of `prediction` against `target`, computed in float32.
    // The mean loss; with `weights` ([B]) each item's elements weighted first, as ai-toolkit's
    // SDTrainer weights the per-element loss by its timestep's weight before the mean.
    at::Tensor loss(const at::Tensor& prediction, const at::Tensor& target,
                    const at::Tensor& weights = {}) const;

  private:
    ObjectiveOptions options_;
    NoiseSchedule schedule_;
    std::optional<FlowMatchConfig> flow_;
    std::vector<std::pair<double, double>> expert_cycle_;
};

}  // namespace loom
