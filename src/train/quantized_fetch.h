#pragma once

// A quantized layer's weight source (low_vram level 2): its codes and scales as the layer's
// buffers, dequantized into the compute dtype for each computation; while the layer streams
// (block streaming) the codes come from the host through the streaming source first. Private to
// the train layer.

#include <memory>

#include "loom/device/device.h"
#include "loom/model/nn/adaptable_layers.h"
#include "loom/model/nn/quantized_weight.h"

namespace loom {

// A quantized layer's weight, dequantized for each computation into the compute dtype (the copy
// dies with the computation, as a streamed weight's); while the layer streams (level 3) its
// codes, scales and bias live on the host and are copied to the device first. The tensors are
// the layer's buffers: moving the layer moves them.
class QuantizedFetch final : public WeightSource {
  public:
    QuantizedFetch(const Device& device, QuantizedWeight weight, at::ScalarType dtype,
                   bool channels_last)
        : device_(device),
          weight_(std::move(weight)),
          dtype_(dtype),
          channels_last_(channels_last) {}
    FetchedWeights fetch(const at::Tensor& /*placeholder*/, const at::Tensor& bias) override {
        if (!streamer_) return {dequantized(weight_), bias};
        // The codes (the bulk) and the bias come as a streamed layer's weight and bias would:
        // through the level's source, which may have copied them ahead (perf.stream_prefetch).
        const FetchedWeights moved = streamer_->fetch(weight_.data, bias);
        QuantizedWeight on_device = weight_;
        on_device.data = moved.weight;
        for (at::Tensor* t : {&on_device.scale, &on_device.minimum}) {
            if (t->defined()) *t = device_.to_device(*t);
        }
        return {dequantized(on_device), moved.bias};
    }
    // While `streamer` is set (level 3) the codes live on the host and come through it.
    void stream_through(std::shared_ptr<WeightSource> streamer) { streamer_ = std::move(streamer); }
    QuantizedWeight& weight() { return weight_; }
    int64_t bytes() const { return weight_.bytes(); }
    // The float weight's shape, and the dtype each fetch dequantizes it to.
    const std::vector<int64_t>& shape() const { return weight_.shape; }
    at::ScalarType dtype() const { return dtype_; }

  private:
    // In the layout the weight had (perf.channels_last convolutions stay channels-last).
    at::Tensor dequantized(const QuantizedWeight& q) const {
        at::Tensor w = dequantize_weight(q, dtype_);
        return channels_last_ ? w.contiguous(at::MemoryFormat::ChannelsLast) : w;
    }

    const Device& device_;
    QuantizedWeight weight_;
    at::ScalarType dtype_;
    bool channels_last_;
    std::shared_ptr<WeightSource> streamer_;
};

}  // namespace loom
