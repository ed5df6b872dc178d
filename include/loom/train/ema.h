#pragma once

// Exponential moving average of the trained weights (train.ema_config): updated after every
// optimizer step, swapped in for saving and sampling, swapped back after.

#include <ATen/core/Tensor.h>

#include <vector>

namespace loom {

class Ema {
  public:
    Ema(const std::vector<at::Tensor>& params, double decay);

    // shadow = decay * shadow + (1 - decay) * param
    void update(const std::vector<at::Tensor>& params);
    // Exchanges the live weights and the averages (call twice to undo).
    void swap(const std::vector<at::Tensor>& params);
    const std::vector<at::Tensor>& shadow() const { return shadow_; }
    void load(const std::vector<at::Tensor>& shadow);

  private:
    std::vector<at::Tensor> shadow_;
    double decay_;
};

}  // namespace loom
