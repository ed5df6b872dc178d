#pragma once

// ref: diffusers schedulers/scheduling_ddpm.py, scheduling_ddim.py,
// scheduling_euler_discrete.py — the DDPM training math and the DDIM and Euler sampling steps,
// in float32 exactly as diffusers computes them (formats.md §4).

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <string>
#include <vector>

namespace loom {

struct NoiseScheduleConfig {
    int64_t num_train_timesteps = 1000;
    double beta_start = 0.00085;
    double beta_end = 0.012;
    std::string beta_schedule = "scaled_linear";  // or "linear"
    std::string prediction_type = "epsilon";      // or "v_prediction"
    int64_t steps_offset = 1;
    bool set_alpha_to_one = false;
    std::string timestep_spacing = "leading";  // DDIM: leading | trailing | linspace
};

class NoiseSchedule {
  public:
    explicit NoiseSchedule(const NoiseScheduleConfig& config = {});
    const NoiseScheduleConfig& config() const { return config_; }
    const at::Tensor& alphas_cumprod() const { return alphas_cumprod_; }  // [T] float32, CPU

    // sqrt(ā_t)·x0 + sqrt(1-ā_t)·noise, with integer timesteps [B] in [0, T).
    at::Tensor add_noise(const at::Tensor& x0, const at::Tensor& noise,
                         const at::Tensor& timesteps) const;
    // v = sqrt(ā_t)·noise - sqrt(1-ā_t)·x0
    at::Tensor velocity(const at::Tensor& x0, const at::Tensor& noise,
                        const at::Tensor& timesteps) const;
    // The training target for the configured prediction type.
    at::Tensor target(const at::Tensor& x0, const at::Tensor& noise,
                      const at::Tensor& timesteps) const;

  private:
    // ā_t gathered for `timesteps` and shaped to broadcast against `like`.
    std::pair<at::Tensor, at::Tensor> coefficients(const at::Tensor& timesteps,
                                                   const at::Tensor& like) const;
    NoiseScheduleConfig config_;
    at::Tensor alphas_cumprod_;
};

// Deterministic DDIM (eta = 0).
class DDIMSampler {
  public:
    DDIMSampler(const NoiseSchedule& schedule, int64_t num_inference_steps);
    const std::vector<int64_t>& timesteps() const { return timesteps_; }
    // One step from `sample` at timesteps()[i] given the model output.
    at::Tensor step(const at::Tensor& model_output, int64_t timestep,
                    const at::Tensor& sample) const;
    double init_noise_sigma() const { return 1.0; }
    at::Tensor scale_model_input(const at::Tensor& sample, std::size_t) const { return sample; }

  private:
    const NoiseSchedule& schedule_;
    int64_t num_inference_steps_;
    std::vector<int64_t> timesteps_;
};

// Euler (EulerDiscreteScheduler, no churn), linspace spacing, linear sigma interpolation.
class EulerSampler {
  public:
    EulerSampler(const NoiseSchedule& schedule, int64_t num_inference_steps);
    const std::vector<double>& timesteps() const { return timesteps_; }
    const at::Tensor& sigmas() const { return sigmas_; }  // [steps + 1] float32, last 0
    double init_noise_sigma() const;
    at::Tensor scale_model_input(const at::Tensor& sample, std::size_t step_index) const;
    at::Tensor step(const at::Tensor& model_output, std::size_t step_index,
                    const at::Tensor& sample) const;

  private:
    const NoiseSchedule& schedule_;
    std::vector<double> timesteps_;
    at::Tensor sigmas_;
};

// Classifier-free guidance: uncond + scale · (cond - uncond).
at::Tensor apply_guidance(const at::Tensor& uncond, const at::Tensor& cond, double scale);

// A DDPM/DDIM/Euler scheduler_config.json (trained_betas and zero-SNR rescaling are refused).
NoiseScheduleConfig read_scheduler_config(const std::filesystem::path& config_json);

}  // namespace loom
