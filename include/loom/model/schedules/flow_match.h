#pragma once

// Flow matching as Flux (and Wan) train and sample: the objective ai-toolkit trains with
// (noise_scheduler: flowmatch), the timestep distributions it draws from (train.timestep_type),
// and diffusers' FlowMatchEulerDiscreteScheduler as the Flux pipeline drives it for previews.
//
// ref: diffusers schedulers/scheduling_flow_match_euler_discrete.py (set_timesteps, step,
//      time_shift), pipelines/flux/pipeline_flux.py::{calculate_shift, FluxPipeline.__call__};
//      ai-toolkit toolkit/samplers/custom_flowmatch_sampler.py (add_noise, set_train_timesteps),
//      jobs/process/BaseSDTrainProcess.py (balanced timestep index sampling), SDTrainer.py
//      (target = noise - latents)
//
// Conventions: a timestep t is in [0, 1000] (sigma x 1000); the model sees t / 1000.

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <optional>
#include <string>

namespace at {
class Generator;
}

namespace loom {

// A FlowMatchEulerDiscreteScheduler's scheduler_config.json (the keys loom implements; the
// others must keep their defaults: see read_flow_match_config).
struct FlowMatchConfig {
    int64_t num_train_timesteps = 1000;
    double shift = 1.0;
    bool use_dynamic_shifting = false;
    double base_shift = 0.5;
    double max_shift = 1.15;
    int64_t base_image_seq_len = 256;
    int64_t max_image_seq_len = 4096;
    // The sampler's shifted sigmas stretched to end at this value (Qwen-Image's 0.02:
    // stretch_shift_to_terminal); unset: not stretched.
    std::optional<double> shift_terminal;
};

// The resolution-dependent shift exponent mu: linear in the packed image token count from
// (base_image_seq_len, base_shift) to (max_image_seq_len, max_shift).
double flow_match_mu(int64_t image_seq_len, const FlowMatchConfig& config);

// Shifted sigmas, float32 as the reference computes them: exp(mu) / (exp(mu) + 1/s - 1) with
// dynamic shifting, else shift * s / (1 + (shift - 1) * s).
at::Tensor flow_match_shift_sigmas(const at::Tensor& sigmas, const FlowMatchConfig& config,
                                   std::optional<double> mu);

// x_t = (1 - t/1000) x0 + (t/1000) noise, per batch item (timesteps [B]).
at::Tensor flow_match_add_noise(const at::Tensor& x0, const at::Tensor& noise,
                                const at::Tensor& timesteps);
// What the model learns to predict: noise - x0.
at::Tensor flow_match_target(const at::Tensor& x0, const at::Tensor& noise);

// ai-toolkit's train.timestep_type values loom draws from.
enum class FlowTimestepType { sigmoid, linear, shift, lognorm_blend, weighted };

// Parses a timestep_type ("flux_shift" is "shift"); nullopt for values loom does not implement
// ("next_sample", "one_step", ...).
std::optional<FlowTimestepType> parse_flow_timestep_type(const std::string& text);

// ai-toolkit's table of 1000 training timesteps for `type`, descending (set_train_timesteps):
// linear and weighted 1000..1; sigmoid sorted 1000 (1 - sigmoid(randn)); shift the shifted sigmas x
// 1000 (mu from `image_seq_len` when the config shifts dynamically); lognorm_blend 750 lognormal
// draws and 250 linear ones. Random types draw from `generator`.
at::Tensor flow_match_train_timesteps(FlowTimestepType type, const FlowMatchConfig& config,
                                      int64_t image_seq_len, at::Generator& generator);
// The loss weight of each of `timesteps` ([B], t x 1000, from the weighted table) for `type`:
// ai-toolkit's default_weighing_scheme at the timestep's index, [B] float32 on the CPU, which
// SDTrainer multiplies into the per-element loss; undefined for the unweighted types.
at::Tensor flow_match_timestep_weights(FlowTimestepType type, const at::Tensor& timesteps);

// One timestep per batch item, as ai-toolkit's "balanced" content_or_style picks them: a uniform
// index in [0, 999) of the table above. Returns [batch] float32 timesteps on the CPU.
at::Tensor flow_match_sample_timesteps(FlowTimestepType type, const FlowMatchConfig& config,
                                       int64_t image_seq_len, int64_t batch,
                                       at::Generator& generator);

// As flow_match_sample_timesteps for one expert of a denoiser made of several (Wan 2.2 14B): the
// index is uniform over the table entries t with above < t <= upto, as ai-toolkit narrows the
// index range to the expert's boundaries (BaseSDTrainProcess "adjust_multistage_timesteps"). Its
// range is the router's exactly: ai-toolkit's low-noise range also takes the one entry just above
// the boundary, which its router then sends to the high-noise expert. When no entry lies inside
// (a sigmoid table can hold none above 875), the entry nearest the span.
at::Tensor flow_match_sample_timesteps_in(FlowTimestepType type, const FlowMatchConfig& config,
                                          int64_t image_seq_len, int64_t batch,
                                          at::Generator& generator, double above, double upto);

// The Euler sampler the Flux pipeline runs: sigmas linspace(1, 1/steps, steps), shifted (mu from
// the packed image token count), stretched to shift_terminal when the config has one, then 0
// appended; step: x + (sigma_next - sigma) * v.
class FlowMatchEulerSampler {
  public:
    FlowMatchEulerSampler(const FlowMatchConfig& config, int64_t steps, int64_t image_seq_len);
    // The scheduler's own spacing, as WanPipeline drives it (set_timesteps(steps) without sigmas,
    // no dynamic shifting): timesteps evenly spaced from sigma_max to sigma_min of the shifted
    // training sigmas, shifted again, in float64, then float32.
    static FlowMatchEulerSampler scheduler_spaced(const FlowMatchConfig& config, int64_t steps);
    int64_t steps() const { return timesteps_.size(0); }
    const at::Tensor& sigmas() const { return sigmas_; }        // [steps + 1] float32
    const at::Tensor& timesteps() const { return timesteps_; }  // [steps] float32, sigma x 1000
    // x_{i+1} from x_i and the model's prediction at step i, computed in float32 and returned in
    // the prediction's dtype.
    at::Tensor step(const at::Tensor& model_output, int64_t index, const at::Tensor& sample) const;

  private:
    FlowMatchEulerSampler() = default;
    at::Tensor sigmas_;
    at::Tensor timesteps_;
};

// A FlowMatchEulerDiscreteScheduler scheduler_config.json: the options it does not implement
// (karras/exponential/beta sigmas, shift_terminal, stochastic sampling, inverted sigmas, a linear
// time shift) must keep their defaults.
FlowMatchConfig read_flow_match_config(const std::filesystem::path& config_json);

}  // namespace loom
