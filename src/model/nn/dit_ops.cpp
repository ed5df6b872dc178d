#include "dit_ops.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <limits>
#include <optional>

namespace loom::dit {

namespace {

// Each pair (x0, x1) of the last dimension turned a quarter: (-x1, x0) when `sign` is 1, the
// inverse (x1, -x0) when it is -1.
at::Tensor quarter_turn(const at::Tensor& x, double sign) {
    auto sizes = x.sizes().vec();
    sizes.back() /= 2;
    sizes.push_back(2);
    const auto parts = x.reshape(sizes).unbind(-1);
    return at::stack({parts[1] * -sign, parts[0] * sign}, -1).flatten(-2);
}

// The rotation is orthogonal, so the gradient is the inverse rotation of the output's gradient,
// g cos + quarter_turn⁻¹(g sin), with nothing saved but the tables.
class RotaryFunction : public torch::autograd::Function<RotaryFunction> {
  public:
    static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                              const at::Tensor& cos, const at::Tensor& sin) {
        ctx->save_for_backward({cos, sin});
        ctx->saved_data["dtype"] = static_cast<int64_t>(x.scalar_type());
        const at::Tensor xf = x.to(at::kFloat);
        return at::addcmul(xf * cos, quarter_turn(xf, 1.0), sin).to(x.scalar_type());
    }
    static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                   torch::autograd::variable_list grads) {
        const auto saved = ctx->get_saved_variables();
        const at::Tensor g = grads[0].to(at::kFloat);
        const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
        const at::Tensor dx = g * saved[0] + quarter_turn(g * saved[1], -1.0);
        return {dx.to(dtype), at::Tensor(), at::Tensor()};
    }
};

}  // namespace

std::pair<at::Tensor, at::Tensor> rotary_tables(const at::Tensor& positions, int64_t dim,
                                                double theta, AnglePrecision precision) {
    if (precision == AnglePrecision::kFloat32Throughout) {
        const auto floats = at::TensorOptions().dtype(at::kFloat).device(positions.device());
        const at::Tensor freqs = 1.0 / at::pow(theta, at::arange(0, dim, 2, floats).div(dim));
        const at::Tensor angles = at::outer(positions.to(at::kFloat), freqs);
        return {angles.cos().repeat_interleave(2, 1), angles.sin().repeat_interleave(2, 1)};
    }
    const auto doubles = at::TensorOptions().dtype(at::kDouble).device(positions.device());
    const at::Tensor freqs =
        1.0 / at::pow(theta, at::arange(0, dim, 2, doubles) / static_cast<double>(dim));
    at::Tensor angles = at::outer(positions.to(at::kDouble), freqs);
    if (precision == AnglePrecision::kFloat32) angles = angles.to(at::kFloat);
    return {angles.cos().repeat_interleave(2, 1).to(at::kFloat),
            angles.sin().repeat_interleave(2, 1).to(at::kFloat)};
}

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    // [S, D] -> [1, S, 1, D] or [B, S, D] -> [B, S, 1, D], broadcast over the heads.
    const auto spread = [](const at::Tensor& t) {
        return (t.dim() == 2 ? t.unsqueeze(0) : t).unsqueeze(2);
    };
    return RotaryFunction::apply(x, spread(cos), spread(sin));
}

at::Tensor key_padding_bias(const at::Tensor& keep) {
    return at::zeros(keep.sizes(), keep.options().dtype(at::kFloat))
        .masked_fill(keep.to(at::kBool).logical_not(), -std::numeric_limits<float>::infinity())
        .unsqueeze(1)
        .unsqueeze(1);
}

at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    return attend(q, k, v, at::Tensor());
}

at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const at::Tensor& bias) {
    const std::optional<at::Tensor> mask =
        bias.defined() ? std::optional<at::Tensor>(bias.to(q.scalar_type())) : std::nullopt;
    const at::Tensor out = at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                            v.transpose(1, 2), mask);
    return out.transpose(1, 2).flatten(2, 3).to(q.scalar_type());
}

}  // namespace loom::dit
