#include "loom/dist/gradient_sync.h"

#include <ATen/ATen.h>

#include "loom/device/host_memory.h"
#include "loom/dist/process_group.h"

namespace loom::dist {

double all_reduce_gradients(ProcessGroup& group, const std::vector<at::Tensor>& params,
                            double loss_here) {
    std::int64_t total = 0;
    for (const at::Tensor& p : params) total += p.numel();
    at::Tensor flat;
    {
        HostAllocations host;  // the exchange buffer never counts against the device's budget
        flat = at::zeros({total + 1}, at::kFloat);
        flat[total] = loss_here;
        std::int64_t at_ = 0;
        for (const at::Tensor& p : params) {
            const at::Tensor g = p.grad();
            if (g.defined()) flat.narrow(0, at_, p.numel()).copy_(g.reshape({-1}));
            at_ += p.numel();
        }
    }
    group.all_reduce_sum(flat);
    std::int64_t at_ = 0;
    for (const at::Tensor& p : params) {
        const at::Tensor sum = flat.narrow(0, at_, p.numel()).view(p.sizes());
        at::Tensor g = p.mutable_grad();
        if (g.defined()) {
            g.copy_(sum);
        } else {
            p.mutable_grad() = sum.to(p.options(), /*non_blocking=*/false, /*copy=*/true);
        }
        at_ += p.numel();
    }
    return flat[total].item<double>();
}

}  // namespace loom::dist
