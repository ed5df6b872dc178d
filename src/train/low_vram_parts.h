#pragma once

// What the low_vram files share (train/low_vram.h, split by concern: low_vram.cpp the levels and
// placement, low_vram_quantization.cpp level 2, low_vram_streaming.cpp block streaming,
// low_vram_experts.cpp the idle expert): moving a module's tensors, and a layer's weight, bias and
// weight source. Private to the train layer.

#include <torch/nn/module.h>

#include <functional>
#include <memory>

#include "loom/device/device.h"
#include "loom/model/nn/adaptable_layers.h"

namespace loom::low_vram_detail {

// Every parameter and buffer of `module` to the device (device-resident on sim) or the host,
// except the weights that stream from the host (a tensor keeps its TensorImpl through set_data).
template <class Stays>
inline void move(torch::nn::Module& module, const Device& device, bool to_device,
                 const Stays& stays) {
    torch::NoGradGuard no_grad;
    for (auto& p : module.parameters()) {
        if (stays(p)) continue;
        p.set_data(to_device ? device.to_device(p.data()) : device.to_host(p.data()));
    }
    for (auto& b : module.buffers()) {
        if (stays(b)) continue;
        b.set_data(to_device ? device.to_device(b.data()) : device.to_host(b.data()));
    }
}

// The layer's weight and bias, and a way to set its weight source (Linear and Conv2d only).
struct LayerParts {
    at::Tensor* weight = nullptr;
    at::Tensor* bias = nullptr;
    std::function<void(std::shared_ptr<WeightSource>)> set_source;
};

inline LayerParts parts_of(torch::nn::Module& m) {
    if (auto* linear = dynamic_cast<LinearImpl*>(&m)) {
        return {&linear->weight, &linear->bias,
                [linear](std::shared_ptr<WeightSource> s) { linear->set_weight_source(s); }};
    }
    if (auto* conv = dynamic_cast<Conv2dImpl*>(&m)) {
        return {&conv->weight, &conv->bias,
                [conv](std::shared_ptr<WeightSource> s) { conv->set_weight_source(s); }};
    }
    return {};
}

}  // namespace loom::low_vram_detail
