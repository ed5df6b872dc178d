#include "loom/model/nn/host_conv.h"

#include <ATen/ATen.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "loom/device/host_memory.h"

namespace loom {

namespace {

// LOOM_HOST_CONV=torch leaves every convolution to torch (for comparisons, docs/BENCHMARKS.md).
bool left_to_torch() {
    static const bool torch_only = [] {
        const char* choice = std::getenv("LOOM_HOST_CONV");
        return choice != nullptr && std::strcmp(choice, "torch") == 0;
    }();
    return torch_only;
}

bool reduced_precision_on_host(const at::Tensor& x, const at::Tensor& weight) {
    const at::ScalarType dtype = x.scalar_type();
    return !left_to_torch() && x.device().is_cpu() && x.layout() == at::kStrided &&
           (dtype == at::kBFloat16 || dtype == at::kHalf) && weight.scalar_type() == dtype &&
           weight.device().is_cpu();
}

bool records_gradient(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
    return at::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad() ||
                                          (bias.defined() && bias.requires_grad()));
}

}  // namespace

at::Tensor frozen_conv(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                       c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
                       int64_t groups) {
    const std::vector<int64_t> no_output_padding(stride.size(), 0);
    if (!reduced_precision_on_host(x, weight) || records_gradient(x, weight, bias)) {
        return at::convolution(x, weight, bias, stride, padding, dilation, false, no_output_padding,
                               groups);
    }
    at::Tensor y;
    {
        const HostAllocations working_copies;
        y = at::convolution(x.to(at::kFloat), weight.to(at::kFloat),
                            bias.defined() ? bias.to(at::kFloat) : bias, stride, padding, dilation,
                            false, no_output_padding, groups);
    }
    return y.to(x.scalar_type());
}

}  // namespace loom
