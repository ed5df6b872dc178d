#pragma once

// One LoRA: lora_down and lora_up around a frozen base layer, adding
//   multiplier · (alpha / rank) · up(down(dropout(x)))
// to the base layer's output (kohya networks/lora.py::LoRAModule). Linear bases get Linear-shaped
// weights (down [r, in], up [out, r]); conv bases get down [r, in, k, k] with the base's stride
// and padding and a 1x1 up [out, r, 1, 1]. Weights are float32 whatever the base's dtype.

#include <ATen/core/Tensor.h>

#include <memory>

#include "loom/model/nn/adaptable_layers.h"

namespace loom {

struct LoRAOptions {
    int64_t rank = 4;
    double alpha = 1.0;    // kohya: 0 means alpha = rank
    double dropout = 0.0;  // on the LoRA input, in training only
};

class LoRAAdapter final : public LayerAdapter {
  public:
    // kohya's initialisation: down kaiming-uniform (a = sqrt(5)), up zeros. Uses the global
    // torch RNG (seed it for reproducible runs).
    static std::shared_ptr<LoRAAdapter> for_linear(const LinearImpl& base, const LoRAOptions& o);
    static std::shared_ptr<LoRAAdapter> for_conv(const Conv2dImpl& base, const LoRAOptions& o);

    at::Tensor forward(const at::Tensor& input) override;
    // Linear layers of the LoRA's dtype: output + scale * up(down(input)) as one addmm.
    at::Tensor add_to(const at::Tensor& output, const at::Tensor& input) override;
    // Linear layers whose input, weight and LoRA share a dtype, without dropout: the base
    // product, the down product and the scaled up product in one autograd operation whose
    // backward computes the input's gradient as one product plus one addmm (and the LoRA's
    // gradients) — fewer kernels and autograd nodes than the base layer and the adapter apart.
    at::Tensor linear(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                      const WeightRefetch& refetch) override;

    // The change this LoRA makes to the base weight: multiplier · scale · up @ down, shaped like
    // the base weight.
    at::Tensor delta_weight() const;

    int64_t rank() const { return down.size(0); }
    double alpha() const { return alpha_; }
    double scale() const { return alpha_ / static_cast<double>(rank()); }
    // A checkpoint trained at another alpha resumes at it (LoRATraining::restore).
    void set_alpha(double alpha) { alpha_ = alpha; }
    bool is_conv() const { return down.dim() == 4; }

    double multiplier = 1.0;
    bool training = false;  // dropout only while training
    at::Tensor down;        // requires grad
    at::Tensor up;          // requires grad

  private:
    LoRAAdapter(at::Tensor down, at::Tensor up, double alpha, double dropout, int64_t stride,
                int64_t padding);
    double alpha_;
    double dropout_;
    int64_t stride_;
    int64_t padding_;
};

}  // namespace loom
