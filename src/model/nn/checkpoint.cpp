#include "loom/model/nn/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/ivalue.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace loom {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Holds the block function in the autograd context (freed with the graph node).
struct FnHolder : torch::CustomClassHolder {
    BlockFn fn;
    std::vector<bool> defined;  // which inputs were defined
    explicit FnHolder(BlockFn f) : fn(std::move(f)) {}
};

struct RngState {
    at::Tensor cpu;
    std::vector<at::Tensor> cuda;
};

RngState capture_rng() {
    RngState s;
    s.cpu = at::detail::getDefaultCPUGenerator().get_state();
    if (at::globalContext().hasCUDA()) {
        const auto& hooks = at::detail::getCUDAHooks();
        for (c10::DeviceIndex i = 0; i < hooks.deviceCount(); ++i) {
            at::Generator generator = hooks.getDefaultGenerator(i);
            s.cuda.push_back(generator.get_state());
        }
    }
    return s;
}

void restore_rng(const RngState& s) {
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    cpu.set_state(s.cpu);
    if (!s.cuda.empty()) {
        const auto& hooks = at::detail::getCUDAHooks();
        for (std::size_t i = 0; i < s.cuda.size(); ++i) {
            at::Generator generator = hooks.getDefaultGenerator(static_cast<c10::DeviceIndex>(i));
            generator.set_state(s.cuda[i]);
        }
    }
}

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
    // inputs: the block's defined tensors, followed by a dummy that requires grad. A TensorList
    // (not a std::vector) so autograd registers every element as an input of the graph node.
    static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<FnHolder> holder,
                                 at::TensorList inputs) {
        RngState rng = capture_rng();
        ctx->saved_data["fn"] = c10::IValue::make_capsule(holder);
        ctx->saved_data["rng_cpu"] = rng.cpu;
        ctx->saved_data["rng_cuda"] = c10::List<at::Tensor>(rng.cuda);
        ctx->save_for_backward(inputs.vec());
        std::vector<at::Tensor> call_inputs = expand(holder, inputs.vec());
        torch::NoGradGuard no_grad;
        return holder->fn(call_inputs);
    }

    static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
        auto holder =
            c10::static_intrusive_pointer_cast<FnHolder>(ctx->saved_data["fn"].toCapsule());
        variable_list saved = ctx->get_saved_variables();
        variable_list detached;
        detached.reserve(saved.size());
        for (const at::Tensor& t : saved) {
            at::Tensor d = t.detach();
            if (d.is_floating_point()) d.requires_grad_(true);
            detached.push_back(d);
        }
        RngState recompute_rng;
        recompute_rng.cpu = ctx->saved_data["rng_cpu"].toTensor();
        for (const at::Tensor& t : ctx->saved_data["rng_cuda"].toTensorList()) {
            recompute_rng.cuda.push_back(t);
        }
        const RngState current = capture_rng();
        restore_rng(recompute_rng);
        variable_list outputs;
        {
            torch::AutoGradMode enable(true);
            outputs = holder->fn(expand(holder, detached));
        }
        restore_rng(current);

        variable_list roots;
        variable_list grads;
        for (std::size_t i = 0; i < outputs.size() && i < grad_outputs.size(); ++i) {
            if (outputs[i].defined() && outputs[i].requires_grad() && grad_outputs[i].defined()) {
                roots.push_back(outputs[i]);
                grads.push_back(grad_outputs[i]);
            }
        }
        if (!roots.empty()) torch::autograd::backward(roots, grads);

        variable_list input_grads;
        input_grads.push_back(at::Tensor());  // the holder argument
        for (const at::Tensor& d : detached) input_grads.push_back(d.grad());
        return input_grads;
    }

    // The block's inputs with undefined tensors restored in their places (dummy dropped).
    static std::vector<at::Tensor> expand(const c10::intrusive_ptr<FnHolder>& holder,
                                          const variable_list& packed) {
        std::vector<at::Tensor> out;
        std::size_t k = 0;
        for (bool defined : holder->defined) out.push_back(defined ? packed[k++] : at::Tensor());
        return out;
    }
};

}  // namespace

std::vector<at::Tensor> checkpoint(const BlockFn& fn, const std::vector<at::Tensor>& inputs) {
    if (!at::GradMode::is_enabled()) return fn(inputs);
    auto holder = c10::make_intrusive<FnHolder>(fn);
    variable_list packed;
    for (const at::Tensor& t : inputs) {
        holder->defined.push_back(t.defined());
        if (t.defined()) packed.push_back(t);
    }
    // Makes the function's outputs require grad even when no real input does (frozen base).
    packed.push_back(at::ones({1}).requires_grad_(true));
    return CheckpointFunction::apply(holder, at::TensorList(packed));
}

}  // namespace loom
