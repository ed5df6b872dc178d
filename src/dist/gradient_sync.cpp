#include "loom/dist/gradient_sync.h"

#include <ATen/ATen.h>

#include <optional>

#include "loom/device/host_memory.h"
#include "loom/dist/process_group.h"

namespace loom::dist {

GradientExchange::GradientExchange(ProcessGroup& group, std::vector<at::Tensor> params,
                                   double loss_here)
    : group_(group), params_(std::move(params)) {
    std::int64_t total = 0;
    for (const at::Tensor& p : params_) total += p.numel();
    on_device_ = !params_.empty() && group_.device_collectives(params_.front().device());
    // The host buffer never counts against the device's budget (sim).
    std::optional<HostAllocations> host;
    if (!on_device_) host.emplace();
    const at::TensorOptions options =
        on_device_ ? params_.front().options().dtype(at::kFloat).requires_grad(false)
                   : at::TensorOptions().dtype(at::kFloat);
    flat_ = at::zeros({total + 1}, options);
    std::int64_t at_ = 0;
    for (const at::Tensor& p : params_) {
        const at::Tensor g = p.grad();
        if (g.defined()) flat_.narrow(0, at_, p.numel()).copy_(g.reshape({-1}));
        at_ += p.numel();
    }
    flat_[total].fill_(loss_here);
}

double GradientExchange::all_reduce() {
    if (on_device_) {
        group_.all_reduce_sum_on_device(flat_);
    } else {
        group_.all_reduce_sum(flat_);
    }
    std::int64_t at_ = 0;
    for (const at::Tensor& p : params_) {
        const at::Tensor sum = flat_.narrow(0, at_, p.numel()).view(p.sizes());
        at::Tensor g = p.mutable_grad();
        if (g.defined()) {
            g.copy_(sum);
        } else {
            p.mutable_grad() = sum.to(p.options(), /*non_blocking=*/false, /*copy=*/true);
        }
        at_ += p.numel();
    }
    return flat_[at_].item<double>();
}

double all_reduce_gradients(ProcessGroup& group, const std::vector<at::Tensor>& params,
                            double loss_here) {
    return GradientExchange(group, params, loss_here).all_reduce();
}

}  // namespace loom::dist
