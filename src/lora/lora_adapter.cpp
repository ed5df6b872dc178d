#include "loom/lora/lora_adapter.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/nn/init.h>

#include <cmath>

#include "loom/model/nn/host_matmul.h"

namespace loom {

namespace {

double effective_alpha(const LoRAOptions& o) {
    return o.alpha == 0.0 ? static_cast<double>(o.rank) : o.alpha;  // kohya's rule
}

at::Tensor kaiming(std::vector<int64_t> shape) {
    at::Tensor t = at::empty(shape, at::kFloat);
    torch::NoGradGuard no_grad;
    torch::nn::init::kaiming_uniform_(t, std::sqrt(5.0));
    return t;
}

// y = x W^T + b + s (x D^T) U^T over the rows of x, and its backward:
//   dx = g W + (s g U) D,   dD = (s g U)^T x,   dU = s g^T (x D^T).
// What it saves is what the base layer and the adapter apart would: x (the down product's
// gradient needs it), the small x D^T, and W only when x needs a gradient — or, for a streamed or
// quantized weight, how to have W again (host_matmul.h WeightRefetch) instead of W.
class LoRALinearFunction : public torch::autograd::Function<LoRALinearFunction> {
  public:
    // The bias travels as an optional: an undefined tensor cannot be an autograd input, and an
    // absent optional is not one.
    static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                              const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                              const at::Tensor& down, const at::Tensor& up, double scale,
                              const WeightRefetch& refetch) {
        const at::Tensor rows = x.reshape({-1, x.size(-1)});
        const at::Tensor h = at::mm(rows, down.t());
        at::Tensor y = linear_rows(rows, weight, bias);
        y.addmm_(h, up.t(), 1.0, scale);
        const bool keep_weight = x.requires_grad() && !refetch;
        if (x.requires_grad() && refetch) ctx->saved_data["refetch"] = refetch_capsule(refetch);
        ctx->save_for_backward({rows, h, keep_weight ? weight : at::Tensor(), down, up});
        ctx->saved_data["scale"] = scale;
        ctx->saved_data["has_bias"] = bias.has_value();
        ctx->saved_data["input_sizes"] = x.sizes().vec();
        std::vector<int64_t> sizes = x.sizes().vec();
        sizes.back() = weight.size(0);
        return y.view(sizes);
    }

    static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                   torch::autograd::variable_list grads) {
        const auto saved = ctx->get_saved_variables();
        const at::Tensor& rows = saved[0];
        const at::Tensor& h = saved[1];
        const auto refetch = ctx->saved_data.find("refetch");
        const at::Tensor weight =
            refetch != ctx->saved_data.end() ? refetch_of(refetch->second)() : saved[2];
        const at::Tensor& down = saved[3];
        const at::Tensor& up = saved[4];
        const double scale = ctx->saved_data["scale"].toDouble();
        const at::Tensor g = grads[0].reshape({-1, up.size(0)});
        const at::Tensor gh = at::mm(g, up).mul_(scale);
        at::Tensor dx, ddown, dup;
        if (ctx->needs_input_grad(0)) {
            dx = linear_rows(g, weight.t())
                     .addmm_(gh, down)
                     .view(ctx->saved_data["input_sizes"].toIntVector());
        }
        // needs_input_grad counts the tensor inputs present: x, weight, the bias if any, down, up.
        const std::size_t first_lora = ctx->saved_data["has_bias"].toBool() ? 3 : 2;
        if (ctx->needs_input_grad(first_lora)) ddown = at::mm(gh.t(), rows);
        if (ctx->needs_input_grad(first_lora + 1)) dup = at::mm(g.t(), h).mul_(scale);
        return {dx, at::Tensor(), at::Tensor(), ddown, dup, at::Tensor(), at::Tensor()};
    }
};

}  // namespace

at::Tensor LoRAAdapter::linear(const at::Tensor& input, const at::Tensor& weight,
                               const at::Tensor& bias, const WeightRefetch& refetch) {
    const at::ScalarType dtype = down.scalar_type();
    if (is_conv() || (training && dropout_ > 0) || input.dim() < 2 ||
        input.scalar_type() != dtype || weight.scalar_type() != dtype ||
        (bias.defined() && bias.scalar_type() != dtype) || weight.requires_grad()) {
        return {};
    }
    return LoRALinearFunction::apply(
        input, weight, bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt, down, up,
        multiplier * scale(), refetch);
}

LoRAAdapter::LoRAAdapter(at::Tensor down_w, at::Tensor up_w, double alpha, double dropout,
                         int64_t stride, int64_t padding)
    : down(std::move(down_w)),
      up(std::move(up_w)),
      alpha_(alpha),
      dropout_(dropout),
      stride_(stride),
      padding_(padding) {
    down.requires_grad_(true);
    up.requires_grad_(true);
}

std::shared_ptr<LoRAAdapter> LoRAAdapter::for_linear(const LinearImpl& base, const LoRAOptions& o) {
    at::Tensor d = kaiming({o.rank, base.in_features()}).to(base.weight.device());
    at::Tensor u = at::zeros({base.out_features(), o.rank}, d.options());
    return std::shared_ptr<LoRAAdapter>(new LoRAAdapter(d, u, effective_alpha(o), o.dropout, 1, 0));
}

std::shared_ptr<LoRAAdapter> LoRAAdapter::for_conv(const Conv2dImpl& base, const LoRAOptions& o) {
    const int64_t in = base.weight.size(1);
    const int64_t out = base.weight.size(0);
    const int64_t k = base.kernel_size();
    at::Tensor d = kaiming({o.rank, in, k, k}).to(base.weight.device());
    at::Tensor u = at::zeros({out, o.rank, 1, 1}, d.options());
    return std::shared_ptr<LoRAAdapter>(
        new LoRAAdapter(d, u, effective_alpha(o), o.dropout, base.stride(), base.padding()));
}

at::Tensor LoRAAdapter::forward(const at::Tensor& input) {
    at::Tensor x = input.to(down.scalar_type());
    if (training && dropout_ > 0) x = at::dropout(x, dropout_, true);
    at::Tensor h;
    if (is_conv()) {
        h = at::conv2d(at::conv2d(x, down, {}, {stride_, stride_}, {padding_, padding_}), up);
    } else {
        h = at::linear(at::linear(x, down), up);
    }
    return (h * (multiplier * scale())).to(input.scalar_type());
}

at::Tensor LoRAAdapter::add_to(const at::Tensor& output, const at::Tensor& input) {
    if (is_conv() || output.scalar_type() != up.scalar_type() || output.dim() < 2) {
        return output + forward(input);
    }
    at::Tensor x = input.to(down.scalar_type());
    if (training && dropout_ > 0) x = at::dropout(x, dropout_, true);
    const at::Tensor h = at::linear(x, down);  // [..., rank]
    const int64_t out_features = up.size(0);
    // beta * output + alpha * h @ up^T: the up-projection, the scale and the sum in one GEMM.
    return at::addmm(output.reshape({-1, out_features}), h.reshape({-1, h.size(-1)}), up.t(), 1.0,
                     multiplier * scale())
        .view(output.sizes());
}

at::Tensor LoRAAdapter::delta_weight() const {
    const at::Tensor d = down.detach().flatten(1);  // [r, in*k*k]
    const at::Tensor u = up.detach().flatten(1);    // [out, r]
    at::Tensor w = at::mm(u, d) * (multiplier * scale());
    if (is_conv()) w = w.view({up.size(0), down.size(1), down.size(2), down.size(3)});
    return w;
}

}  // namespace loom
