#include "loom/model/schedules/flow_match.h"

#include <ATen/ATen.h>

#include <cmath>

#include "loading/config_reader.h"
#include "loom/core/error.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kTrainTimesteps = 1000;  // ai-toolkit's table size (set_train_timesteps(1000))
constexpr int64_t kMaxIndex = 999;         // max_denoising_steps: indices are drawn in [0, 999)

const auto kFloat = at::TensorOptions().dtype(at::kFloat);

}  // namespace

double flow_match_mu(int64_t image_seq_len, const FlowMatchConfig& c) {
    const double m = (c.max_shift - c.base_shift) /
                     static_cast<double>(c.max_image_seq_len - c.base_image_seq_len);
    const double b = c.base_shift - m * static_cast<double>(c.base_image_seq_len);
    return static_cast<double>(image_seq_len) * m + b;
}

at::Tensor flow_match_shift_sigmas(const at::Tensor& sigmas, const FlowMatchConfig& c,
                                   std::optional<double> mu) {
    if (c.use_dynamic_shifting) {
        if (!mu) throw Error("flow matching: dynamic shifting needs the image token count (mu)");
        // The reference mixes a Python float into float32 arrays: the scalar becomes float32.
        const at::Tensor e = at::full_like(sigmas, static_cast<float>(std::exp(*mu)));
        return e / (e + (1.0 / sigmas - 1.0));
    }
    const at::Tensor shift = at::full_like(sigmas, static_cast<float>(c.shift));
    return shift * sigmas / (1.0 + (shift - 1.0) * sigmas);
}

at::Tensor flow_match_add_noise(const at::Tensor& x0, const at::Tensor& noise,
                                const at::Tensor& timesteps) {
    std::vector<int64_t> shape(static_cast<std::size_t>(x0.dim()), 1);
    shape[0] = x0.size(0);
    const at::Tensor t = (timesteps.to(x0.device()) / 1000).view(shape);
    return (1.0 - t) * x0 + t * noise;
}

at::Tensor flow_match_target(const at::Tensor& x0, const at::Tensor& noise) {
    return noise - x0;
}

std::optional<FlowTimestepType> parse_flow_timestep_type(const std::string& text) {
    if (text == "sigmoid") return FlowTimestepType::sigmoid;
    if (text == "linear") return FlowTimestepType::linear;
    if (text == "shift" || text == "flux_shift") return FlowTimestepType::shift;
    if (text == "lognorm_blend") return FlowTimestepType::lognorm_blend;
    if (text == "weighted") return FlowTimestepType::weighted;
    return std::nullopt;
}

at::Tensor flow_match_train_timesteps(FlowTimestepType type, const FlowMatchConfig& c,
                                      int64_t image_seq_len, at::Generator& generator) {
    switch (type) {
        case FlowTimestepType::linear:
        case FlowTimestepType::weighted: return at::linspace(1000, 1, kTrainTimesteps, kFloat);
        case FlowTimestepType::sigmoid: {
            const at::Tensor t = at::sigmoid(at::randn({kTrainTimesteps}, generator, kFloat));
            return std::get<0>(at::sort((1 - t) * 1000, /*dim=*/0, /*descending=*/true));
        }
        case FlowTimestepType::shift: {
            // The scheduler's own range: sigma_max and sigma_min of its 1000 training sigmas
            // (shifted already when the shift is static), in float64 as numpy runs it.
            const auto doubles = at::TensorOptions().dtype(at::kDouble);
            const float n = static_cast<float>(c.num_train_timesteps);
            double sigma_max = 1.0;
            double sigma_min = static_cast<double>(1.0f / n);
            if (!c.use_dynamic_shifting) {
                const float s = static_cast<float>(c.shift);
                sigma_min = static_cast<double>(s * (1.0f / n) / (1.0f + (s - 1.0f) * (1.0f / n)));
                sigma_max = static_cast<double>(s * 1.0f / (1.0f + (s - 1.0f) * 1.0f));
            }
            const double steps = static_cast<double>(c.num_train_timesteps);
            at::Tensor sigmas =
                at::linspace(sigma_max * steps, sigma_min * steps, kTrainTimesteps, doubles) /
                steps;
            if (c.use_dynamic_shifting) {
                const double e = std::exp(flow_match_mu(image_seq_len, c));
                sigmas = e / (e + (1.0 / sigmas - 1.0));
            } else {
                sigmas = c.shift * sigmas / (1.0 + (c.shift - 1.0) * sigmas);
            }
            return sigmas.to(at::kFloat) * static_cast<float>(c.num_train_timesteps);
        }
        case FlowTimestepType::lognorm_blend: {
            const int64_t drawn = static_cast<int64_t>(kTrainTimesteps * 0.75);
            const at::Tensor t1 = at::normal(0.0, 0.333, {drawn}, generator, kFloat).exp();
            const at::Tensor lognormal = (1 - t1 / t1.max()) * 1000;
            const at::Tensor linear = at::linspace(1000, 1, kTrainTimesteps - drawn, kFloat);
            const at::Tensor all =
                std::get<0>(at::sort(at::cat({lognormal, linear}), 0, /*descending=*/true));
            return all.to(at::kInt).to(at::kFloat);
        }
    }
    throw Error("flow matching: unknown timestep type");
}

at::Tensor flow_match_sample_timesteps(FlowTimestepType type, const FlowMatchConfig& c,
                                       int64_t image_seq_len, int64_t batch,
                                       at::Generator& generator) {
    const at::Tensor table = flow_match_train_timesteps(type, c, image_seq_len, generator);
    const at::Tensor index =
        at::randint(0, kMaxIndex, {batch}, generator, at::TensorOptions().dtype(at::kLong));
    return table.index_select(0, index);
}

at::Tensor flow_match_sample_timesteps_in(FlowTimestepType type, const FlowMatchConfig& c,
                                          int64_t image_seq_len, int64_t batch,
                                          at::Generator& generator, double above, double upto) {
    const at::Tensor table =
        flow_match_train_timesteps(type, c, image_seq_len, generator).slice(0, 0, kMaxIndex);
    const at::Tensor inside = ((table > above) & (table <= upto)).nonzero().flatten();
    at::Tensor candidates = inside;
    if (inside.numel() == 0) {
        const at::Tensor distance = at::minimum((table - above).abs(), (table - upto).abs());
        candidates = distance.argmin().view({1});
    }
    const at::Tensor pick = at::randint(0, candidates.numel(), {batch}, generator,
                                        at::TensorOptions().dtype(at::kLong));
    return table.index_select(0, candidates.index_select(0, pick));
}

FlowMatchEulerSampler::FlowMatchEulerSampler(const FlowMatchConfig& c, int64_t steps,
                                             int64_t image_seq_len) {
    if (steps < 1) throw Error("flow matching sampler: at least one step");
    // FluxPipeline: np.linspace(1.0, 1 / steps, steps) in float64, then float32 in the scheduler.
    const at::Tensor base = at::linspace(1.0, 1.0 / static_cast<double>(steps), steps,
                                         at::TensorOptions().dtype(at::kDouble))
                                .to(at::kFloat);
    at::Tensor shifted = flow_match_shift_sigmas(
        base, c,
        c.use_dynamic_shifting ? std::optional<double>(flow_match_mu(image_seq_len, c))
                               : std::nullopt);
    if (c.shift_terminal) {
        // stretch_shift_to_terminal, in float32: 1 - (1 - s) / ((1 - s_last) / (1 - terminal)).
        const at::Tensor one_minus = 1.0 - shifted;
        const at::Tensor scale = one_minus[-1] / (1.0 - *c.shift_terminal);
        shifted = 1.0 - one_minus / scale;
    }
    timesteps_ = shifted * static_cast<float>(c.num_train_timesteps);
    sigmas_ = at::cat({shifted, at::zeros({1}, kFloat)});
}

FlowMatchEulerSampler FlowMatchEulerSampler::scheduler_spaced(const FlowMatchConfig& c,
                                                              int64_t steps) {
    if (steps < 1) throw Error("flow matching sampler: at least one step");
    if (c.use_dynamic_shifting) {
        throw Error("flow matching sampler: the scheduler's own spacing needs a fixed shift");
    }
    if (c.shift_terminal) {
        throw Error("flow matching sampler: the scheduler's own spacing takes no shift_terminal");
    }
    // __init__: the training sigmas (N..1) / N shifted in float32; the last is sigma_min, the
    // first (1, which the shift keeps) sigma_max.
    const auto n = static_cast<float>(c.num_train_timesteps);
    const double sigma_min =
        flow_match_shift_sigmas(at::full({1}, 1.0f, kFloat) / n, c, std::nullopt).item<double>();
    const double t_max = static_cast<double>(c.num_train_timesteps);
    // set_timesteps: np.linspace(t_max, t_min, steps) / N, shifted, all in float64.
    const at::Tensor sigmas =
        at::linspace(t_max, sigma_min * t_max, steps, at::TensorOptions().dtype(at::kDouble)) /
        t_max;
    const at::Tensor shifted = (c.shift * sigmas / (1.0 + (c.shift - 1.0) * sigmas)).to(kFloat);
    FlowMatchEulerSampler sampler;
    sampler.timesteps_ = shifted * static_cast<float>(c.num_train_timesteps);
    sampler.sigmas_ = at::cat({shifted, at::zeros({1}, kFloat)});
    return sampler;
}

at::Tensor FlowMatchEulerSampler::step(const at::Tensor& model_output, int64_t index,
                                       const at::Tensor& sample) const {
    TORCH_CHECK(index >= 0 && index < steps(), "flow matching step ", index, " of ", steps());
    const at::Tensor dt = (sigmas_[index + 1] - sigmas_[index]).to(model_output.device());
    return (sample.to(at::kFloat) + dt * model_output).to(model_output.scalar_type());
}

FlowMatchConfig read_flow_match_config(const fs::path& path) {
    const ConfigReader r(path);
    FlowMatchConfig c;
    c.num_train_timesteps = r.integer("num_train_timesteps", c.num_train_timesteps);
    c.shift = r.number("shift", c.shift);
    c.use_dynamic_shifting = r.boolean("use_dynamic_shifting", c.use_dynamic_shifting);
    c.base_shift = r.number("base_shift", c.base_shift);
    c.max_shift = r.number("max_shift", c.max_shift);
    c.base_image_seq_len = r.integer("base_image_seq_len", c.base_image_seq_len);
    c.max_image_seq_len = r.integer("max_image_seq_len", c.max_image_seq_len);
    for (const char* key : {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas",
                            "invert_sigmas", "stochastic_sampling"}) {
        r.require_default<bool>(key, false);
    }
    if (r.has("shift_terminal")) {
        c.shift_terminal = r.number("shift_terminal", 0.0);
        if (*c.shift_terminal <= 0 || *c.shift_terminal >= 1) {
            r.fail("shift_terminal", "must lie between 0 and 1");
        }
    }
    r.require_default<std::string>("time_shift_type", "exponential");
    if (c.num_train_timesteps < 1 || c.max_image_seq_len <= c.base_image_seq_len) {
        r.fail("num_train_timesteps", "and max_image_seq_len > base_image_seq_len are required");
    }
    return c;
}

}  // namespace loom
