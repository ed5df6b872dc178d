#include "loom/lora/lora_adapter.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>

#include <cmath>

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

}  // namespace

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
