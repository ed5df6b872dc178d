#pragma once

// Prodigy (`optimizer: prodigy`), prodigyopt's learning-rate-free Adam (Mishchenko & Defazio):
// Adam whose step is scaled by an estimate d of the distance to the solution, grown from d0 as
// training shows how far the weights move along their gradients. prodigyopt 1.1's step as
// ai-toolkit builds it (eps=1e-6, the job's lr as Prodigy's lr — users write lr: 1), operation
// for operation. State per parameter: the two Adam moments (scaled by d), the running s and the
// initial weights p0 (one zero when a parameter starts at zero, as LoRA up-projections do);
// scalars d, d_max, d_numerator and the step count. All or nothing, as every loom optimizer.

#include <ATen/core/Tensor.h>

#include <limits>
#include <optional>
#include <vector>

#include "loom/train/optimizer.h"

namespace loom {

struct ProdigyOptions {
    double beta1 = 0.9;
    double beta2 = 0.999;
    std::optional<double> beta3;  // sqrt(beta2) when absent
    double eps = 1e-6;            // ai-toolkit passes eps=1e-6 (prodigyopt's default is 1e-8)
    double weight_decay = 0.0;
    bool decouple = true;
    bool use_bias_correction = false;
    bool safeguard_warmup = false;
    double d0 = 1e-6;
    double d_coef = 1.0;
    double growth_rate = std::numeric_limits<double>::infinity();
};

class Prodigy final : public Optimizer {
  public:
    Prodigy(std::vector<at::Tensor> params, ProdigyOptions options);

    void step(double lr) override;
    std::int64_t steps_taken() const override { return k_; }
    // Lists "exp_avg", "exp_avg_sq", "s", "p0"; scalars "d", "d_max", "d_numerator", "d_hat".
    OptimizerState state() const override;
    void load_state(const OptimizerState& state) override;
    std::uint64_t state_bytes() const override;

    // The current distance estimate (the learning rate Prodigy adapts is d * lr).
    double d() const { return d_; }

  private:
    ProdigyOptions options_;
    std::vector<at::Tensor> exp_avg_;
    std::vector<at::Tensor> exp_avg_sq_;
    std::vector<at::Tensor> s_;
    std::vector<at::Tensor> p0_;
    double d_;
    double d_max_;
    double d_numerator_ = 0.0;
    double d_hat_ = 0.0;
    std::int64_t k_ = 0;
};

}  // namespace loom
