#include "loom/model/nn/host_matmul.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "loom/device/host_memory.h"

namespace loom {

namespace {

// LOOM_HOST_MATMUL=torch: torch's kernels everywhere (for comparisons).
bool torch_only() {
    static const bool only = [] {
        const char* choice = std::getenv("LOOM_HOST_MATMUL");
        return choice != nullptr && std::strcmp(choice, "torch") == 0;
    }();
    return only;
}

// oneDNN's Linear kernel as torch registers it for its CPU compiler (no autograd formula: it is
// called only where autograd is off, inside a custom Function or under no_grad), or nothing when
// this torch lacks it or LOOM_HOST_MATMUL=torch.
const c10::OperatorHandle* onednn_linear() {
    static const std::optional<c10::OperatorHandle> op =
        []() -> std::optional<c10::OperatorHandle> {
        if (torch_only()) return std::nullopt;
        return c10::Dispatcher::singleton().findSchema({"mkldnn::_linear_pointwise", ""});
    }();
    return op ? &*op : nullptr;
}

bool host_float(const at::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.layout() == at::kStrided;
}

bool host_reduced(const at::Tensor& t) {
    return t.device().is_cpu() && t.layout() == at::kStrided &&
           (t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf);
}

// Reduced-precision operands of one dtype on the host, outside autograd: the product computed in
// float32 and rounded once (see linear_rows).
bool float32_for_reduced(const at::Tensor& rows, const at::Tensor& weight,
                         const c10::optional<at::Tensor>& bias) {
    if (at::GradMode::is_enabled() || torch_only() || !host_reduced(rows)) return false;
    const at::ScalarType dtype = rows.scalar_type();
    return weight.scalar_type() == dtype && host_reduced(weight) &&
           (!bias || (bias->scalar_type() == dtype && host_reduced(*bias)));
}

struct RefetchHolder : torch::CustomClassHolder {
    explicit RefetchHolder(WeightRefetch f) : fetch(std::move(f)) {}
    WeightRefetch fetch;
};

// x · Wᵀ + b with W and b frozen: one autograd operation whose backward is dx = g · W, with W
// saved or, given a refetch, had again.
class FrozenLinearFunction : public torch::autograd::Function<FrozenLinearFunction> {
  public:
    static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                              const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                              const WeightRefetch& refetch) {
        if (refetch) {
            ctx->saved_data["refetch"] = refetch_capsule(refetch);
        } else {
            ctx->save_for_backward({weight});
        }
        ctx->saved_data["input_sizes"] = x.sizes().vec();
        std::vector<int64_t> sizes = x.sizes().vec();
        sizes.back() = weight.size(0);
        return linear_rows(x.reshape({-1, x.size(-1)}), weight, bias).view(sizes);
    }
    static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                   torch::autograd::variable_list grads) {
        const auto refetch = ctx->saved_data.find("refetch");
        const at::Tensor weight = refetch != ctx->saved_data.end() ? refetch_of(refetch->second)()
                                                                   : ctx->get_saved_variables()[0];
        const at::Tensor g = grads[0].reshape({-1, weight.size(0)});
        const at::Tensor dx =
            linear_rows(g, weight.t()).view(ctx->saved_data["input_sizes"].toIntVector());
        return {dx, at::Tensor(), at::Tensor(), at::Tensor()};
    }
};

}  // namespace

at::Tensor linear_rows(const at::Tensor& rows, const at::Tensor& weight,
                       const c10::optional<at::Tensor>& bias) {
    if (float32_for_reduced(rows, weight, bias)) {
        at::Tensor y;
        {
            const HostAllocations working_copies;
            y = linear_rows(rows.to(at::kFloat), weight.to(at::kFloat),
                            bias ? c10::optional<at::Tensor>(bias->to(at::kFloat)) : c10::nullopt);
        }
        return y.to(rows.scalar_type());
    }
    const c10::OperatorHandle* op = onednn_linear();
    if (op != nullptr && !at::GradMode::is_enabled() && rows.dim() == 2 && weight.dim() == 2 &&
        host_float(rows) && host_float(weight) && (!bias || host_float(*bias)) &&
        rows.size(1) == weight.size(1)) {  // a mismatch gets torch's own error below
        torch::jit::Stack stack{rows,
                                weight,
                                bias ? c10::IValue(*bias) : c10::IValue(),
                                c10::IValue(std::string("none")),
                                c10::IValue(c10::List<c10::optional<at::Scalar>>()),
                                c10::IValue()};
        op->callBoxed(&stack);
        return stack.at(0).toTensor();
    }
    return bias ? at::addmm(*bias, rows, weight.t()) : at::mm(rows, weight.t());
}

bool host_matmul_uses_onednn() {
    return onednn_linear() != nullptr;
}

at::Tensor frozen_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                         const WeightRefetch& refetch) {
    const bool frozen = !weight.requires_grad() && !(bias.defined() && bias.requires_grad());
    const c10::optional<at::Tensor> b =
        bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt;
    // A refetched weight needs the custom backward whatever the kernel: at::linear would keep the
    // forward's copy for its own.
    if (refetch && frozen && x.dim() >= 2 && x.requires_grad() && at::GradMode::is_enabled()) {
        return FrozenLinearFunction::apply(x, weight, b, refetch);
    }
    const bool float_kernel = onednn_linear() != nullptr && host_float(x) && host_float(weight) &&
                              (!bias.defined() || host_float(bias));
    const bool reduced_kernel = !torch_only() && host_reduced(x) &&
                                weight.scalar_type() == x.scalar_type() &&
                                (!bias.defined() || bias.scalar_type() == x.scalar_type());
    if (!frozen || x.dim() < 2 || !(float_kernel || reduced_kernel)) {
        return at::linear(x, weight, bias);
    }
    return FrozenLinearFunction::apply(x, weight, b, WeightRefetch());
}

c10::IValue refetch_capsule(const WeightRefetch& refetch) {
    return c10::IValue::make_capsule(c10::make_intrusive<RefetchHolder>(refetch));
}

WeightRefetch refetch_of(const c10::IValue& capsule) {
    return c10::static_intrusive_pointer_cast<RefetchHolder>(capsule.toCapsule())->fetch;
}

}  // namespace loom
