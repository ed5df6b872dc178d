#include "loom/model/schedules/noise_schedule.h"

#include <ATen/ATen.h>

#include <cmath>

#include "loading/config_reader.h"
#include "loom/core/error.h"

namespace loom {

namespace fs = std::filesystem;

NoiseSchedule::NoiseSchedule(const NoiseScheduleConfig& c) : config_(c) {
    const auto f32 = at::TensorOptions().dtype(at::kFloat);
    at::Tensor betas;
    if (c.beta_schedule == "scaled_linear") {
        betas =
            at::linspace(std::sqrt(c.beta_start), std::sqrt(c.beta_end), c.num_train_timesteps, f32)
                .pow(2);
    } else if (c.beta_schedule == "linear") {
        betas = at::linspace(c.beta_start, c.beta_end, c.num_train_timesteps, f32);
    } else {
        throw Error("scheduler: beta_schedule '" + c.beta_schedule +
                    "' is not supported (scaled_linear or linear)");
    }
    if (c.prediction_type != "epsilon" && c.prediction_type != "v_prediction") {
        throw Error("scheduler: prediction_type '" + c.prediction_type +
                    "' is not supported (epsilon or v_prediction)");
    }
    alphas_cumprod_ = at::cumprod(1.0 - betas, 0);
}

std::pair<at::Tensor, at::Tensor> NoiseSchedule::coefficients(const at::Tensor& timesteps,
                                                              const at::Tensor& like) const {
    const at::Tensor ac = alphas_cumprod_.to(like.device(), like.scalar_type());
    const at::Tensor a = ac.index_select(0, timesteps.to(like.device(), at::kLong).flatten());
    at::Tensor sqrt_alpha = a.pow(0.5).flatten();
    at::Tensor sqrt_one_minus = (1 - a).pow(0.5).flatten();
    while (sqrt_alpha.dim() < like.dim()) {
        sqrt_alpha = sqrt_alpha.unsqueeze(-1);
        sqrt_one_minus = sqrt_one_minus.unsqueeze(-1);
    }
    return {sqrt_alpha, sqrt_one_minus};
}

at::Tensor NoiseSchedule::add_noise(const at::Tensor& x0, const at::Tensor& noise,
                                    const at::Tensor& timesteps) const {
    const auto [sa, s1m] = coefficients(timesteps, x0);
    return sa * x0 + s1m * noise;
}

at::Tensor NoiseSchedule::velocity(const at::Tensor& x0, const at::Tensor& noise,
                                   const at::Tensor& timesteps) const {
    const auto [sa, s1m] = coefficients(timesteps, x0);
    return sa * noise - s1m * x0;
}

at::Tensor NoiseSchedule::target(const at::Tensor& x0, const at::Tensor& noise,
                                 const at::Tensor& timesteps) const {
    return config_.prediction_type == "v_prediction" ? velocity(x0, noise, timesteps) : noise;
}

DDIMSampler::DDIMSampler(const NoiseSchedule& schedule, int64_t steps)
    : schedule_(schedule), num_inference_steps_(steps) {
    const NoiseScheduleConfig& c = schedule.config();
    if (steps < 1 || steps > c.num_train_timesteps) {
        throw Error("DDIM: sample_steps must be in [1, " + std::to_string(c.num_train_timesteps) +
                    "], got " + std::to_string(steps));
    }
    const int64_t n = c.num_train_timesteps;
    if (c.timestep_spacing == "leading") {
        const int64_t ratio = n / steps;
        for (int64_t i = steps - 1; i >= 0; --i) timesteps_.push_back(i * ratio + c.steps_offset);
    } else if (c.timestep_spacing == "trailing") {
        const double ratio = static_cast<double>(n) / static_cast<double>(steps);
        for (int64_t i = 0; i < steps; ++i) {
            timesteps_.push_back(static_cast<int64_t>(std::round(n - i * ratio)) - 1);
        }
    } else if (c.timestep_spacing == "linspace") {
        for (int64_t i = steps - 1; i >= 0; --i) {
            const double t = steps == 1 ? 0.0 : static_cast<double>(i) * (n - 1) / (steps - 1);
            timesteps_.push_back(static_cast<int64_t>(std::round(t)));
        }
    } else {
        throw Error("DDIM: timestep_spacing '" + c.timestep_spacing + "' is not supported");
    }
}

at::Tensor DDIMSampler::step(const at::Tensor& model_output, int64_t timestep,
                             const at::Tensor& sample) const {
    const NoiseScheduleConfig& c = schedule_.config();
    const at::Tensor& ac = schedule_.alphas_cumprod();
    const int64_t prev = timestep - c.num_train_timesteps / num_inference_steps_;
    // 0-dim float32 tensors, as diffusers computes them.
    const at::Tensor alpha_t = ac[timestep];
    const at::Tensor alpha_prev =
        prev >= 0 ? ac[prev] : (c.set_alpha_to_one ? at::ones({}, ac.options()) : ac[0]);
    const at::Tensor beta_t = 1 - alpha_t;
    const auto like = [&](const at::Tensor& s) {
        return s.to(sample.device(), sample.scalar_type());
    };
    at::Tensor x0;
    at::Tensor eps;
    if (c.prediction_type == "epsilon") {
        x0 = (sample - like(beta_t.pow(0.5)) * model_output) / like(alpha_t.pow(0.5));
        eps = model_output;
    } else {
        x0 = like(alpha_t.pow(0.5)) * sample - like(beta_t.pow(0.5)) * model_output;
        eps = like(alpha_t.pow(0.5)) * model_output + like(beta_t.pow(0.5)) * sample;
    }
    const at::Tensor direction = like((1 - alpha_prev).pow(0.5)) * eps;
    return like(alpha_prev.pow(0.5)) * x0 + direction;
}

EulerSampler::EulerSampler(const NoiseSchedule& schedule, int64_t steps) : schedule_(schedule) {
    const int64_t n = schedule.config().num_train_timesteps;
    if (steps < 1 || steps > n) {
        throw Error("Euler: sample_steps must be in [1, " + std::to_string(n) + "], got " +
                    std::to_string(steps));
    }
    // np.linspace(0, n - 1, steps, dtype=float32)[::-1]
    const at::Tensor t =
        at::linspace(0, static_cast<double>(n - 1), steps, at::kDouble).to(at::kFloat).flip(0);
    // float32 like diffusers' torch computation; np.interp then works in float64.
    const at::Tensor& ac = schedule.alphas_cumprod();
    const at::Tensor base = ((1 - ac) / ac).pow(0.5);
    std::vector<double> sig;
    const auto base_a = base.accessor<float, 1>();
    const auto t_a = t.accessor<float, 1>();
    for (int64_t i = 0; i < steps; ++i) {
        const double ti = t_a[i];
        timesteps_.push_back(ti);
        // np.interp(t, arange(n), sigmas)
        const auto lo = static_cast<int64_t>(std::floor(ti));
        const int64_t hi = std::min(lo + 1, n - 1);
        const double w = ti - static_cast<double>(lo);
        sig.push_back(static_cast<double>(base_a[lo]) * (1 - w) +
                      static_cast<double>(base_a[hi]) * w);
    }
    sig.push_back(0.0);
    sigmas_ = at::tensor(sig, at::kDouble).to(at::kFloat);
}

double EulerSampler::init_noise_sigma() const {
    return sigmas_.max().item<double>();  // diffusers, linspace spacing: the largest sigma
}

at::Tensor EulerSampler::scale_model_input(const at::Tensor& sample, std::size_t i) const {
    const at::Tensor sigma = sigmas_[static_cast<int64_t>(i)];
    return sample / (sigma.pow(2) + 1).pow(0.5).to(sample.device(), sample.scalar_type());
}

at::Tensor EulerSampler::step(const at::Tensor& model_output, std::size_t i,
                              const at::Tensor& sample) const {
    // diffusers upcasts the sample to float32 for the step.
    const at::Tensor s = sample.to(at::kFloat);
    const at::Tensor sigma = sigmas_[static_cast<int64_t>(i)].to(s.device());
    const at::Tensor sigma_next = sigmas_[static_cast<int64_t>(i) + 1].to(s.device());
    at::Tensor x0;
    if (schedule_.config().prediction_type == "epsilon") {
        x0 = s - sigma * model_output;
    } else {
        x0 = model_output * (-sigma / (sigma.pow(2) + 1).pow(0.5)) + s / (sigma.pow(2) + 1);
    }
    const at::Tensor derivative = (s - x0) / sigma;
    const at::Tensor dt = sigma_next - sigma;
    return (s + derivative * dt).to(sample.scalar_type());
}

at::Tensor apply_guidance(const at::Tensor& uncond, const at::Tensor& cond, double scale) {
    return uncond + scale * (cond - uncond);
}

NoiseScheduleConfig read_scheduler_config(const fs::path& path) {
    const ConfigReader r(path);
    NoiseScheduleConfig c;
    c.num_train_timesteps = r.integer("num_train_timesteps", 1000);
    c.beta_start = r.number("beta_start", 0.0001);
    c.beta_end = r.number("beta_end", 0.02);
    c.beta_schedule = r.text("beta_schedule", "linear");
    c.prediction_type = r.text("prediction_type", "epsilon");
    c.steps_offset = r.integer("steps_offset", 0);
    c.set_alpha_to_one = r.boolean("set_alpha_to_one", true);
    c.timestep_spacing = r.text("timestep_spacing", "leading");
    r.require_default<bool>("rescale_betas_zero_snr", false);
    if (r.has("trained_betas")) r.fail("trained_betas", "is not supported by loom");
    return c;
}

}  // namespace loom
