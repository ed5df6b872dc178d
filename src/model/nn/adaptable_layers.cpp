#include "loom/model/nn/adaptable_layers.h"

#include <torch/nn/functional/conv.h>
#include <torch/nn/init.h>

#include <cmath>

#include "loom/model/nn/host_conv.h"
#include "loom/model/nn/host_matmul.h"

namespace loom {

namespace {

// torch.nn's default initialisation (kaiming_uniform with a=sqrt(5), bias from fan_in); real
// weights are loaded over it, but tiny random test models use it as is.
void reset(at::Tensor& weight, at::Tensor& bias, int64_t fan_in) {
    torch::NoGradGuard no_grad;
    torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
    if (bias.defined()) {
        const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
        bias.uniform_(-bound, bound);
    }
}

}  // namespace

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool with_bias) {
    weight = register_parameter("weight", torch::empty({out_features, in_features}));
    if (with_bias) bias = register_parameter("bias", torch::empty({out_features}));
    reset(weight, bias, in_features);
}

namespace {

FetchedWeights fetched(const std::shared_ptr<WeightSource>& source, const at::Tensor& weight,
                       const at::Tensor& bias) {
    return source ? source->fetch(weight, bias) : FetchedWeights{weight, bias};
}

}  // namespace

at::Tensor LinearImpl::forward(const at::Tensor& x) {
    // A fetched weight (streamed, dequantized) is fetched again for the backward rather than
    // kept alive by autograd until then. The module outlives its backward.
    WeightRefetch refetch;
    if (source_ && at::GradMode::is_enabled() && x.requires_grad()) {
        refetch = [this] { return fetched(source_, weight, bias).weight; };
    }
    at::Tensor y;
    {  // fetched copies go as soon as the base output exists
        const FetchedWeights w = fetched(source_, weight, bias);
        if (adapter_) {
            y = adapter_->linear(x, w.weight, w.bias, refetch);
            if (y.defined()) return y;
        }
        y = frozen_linear(x, w.weight, w.bias, refetch);
    }
    if (adapter_) y = adapter_->add_to(y, x);
    return y;
}

Conv2dImpl::Conv2dImpl(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride,
                       int64_t padding, bool with_bias)
    : stride_(stride), padding_(padding) {
    weight =
        register_parameter("weight", torch::empty({out_channels, in_channels, kernel, kernel}));
    if (with_bias) bias = register_parameter("bias", torch::empty({out_channels}));
    reset(weight, bias, in_channels * kernel * kernel);
}

at::Tensor Conv2dImpl::forward(const at::Tensor& x) {
    at::Tensor y;
    {
        const FetchedWeights w = fetched(source_, weight, bias);
        y = frozen_conv(x, w.weight, w.bias, {stride_, stride_}, {padding_, padding_}, {1, 1});
    }
    if (adapter_) y = y + adapter_->forward(x);
    return y;
}

}  // namespace loom
