#pragma once

// Linear and Conv2d layers whose output an adapter (a LoRA, later issues) can add to, with the
// same parameter names as torch.nn ("weight", "bias") so diffusers state dicts load unchanged.
// The base weight is what the checkpoint holds; an attached adapter's delta is added to the
// layer's output, never folded in unless merged explicitly.

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>

#include "loom/model/nn/host_matmul.h"

namespace loom {

// Something that adds to a layer's output: forward(input) returns the delta.
class LayerAdapter {
  public:
    virtual ~LayerAdapter() = default;
    virtual at::Tensor forward(const at::Tensor& input) = 0;
    // The layer's `output` with the adapter's delta for `input` added. An adapter may fuse the
    // addition into its last product (one GEMM instead of a product, a scale and a sum).
    virtual at::Tensor add_to(const at::Tensor& output, const at::Tensor& input) {
        return output + forward(input);
    }
    // The whole Linear layer with the adapter, linear(input, weight, bias) plus the delta, when
    // the adapter computes it as one autograd operation (one forward, one backward); undefined
    // when it does not, and the layer computes its base output and calls add_to. With
    // `refetch` (a streamed or quantized weight, host_matmul.h) the backward has the weight again
    // from it rather than keeping `weight` alive.
    virtual at::Tensor linear(const at::Tensor& /*input*/, const at::Tensor& /*weight*/,
                              const at::Tensor& /*bias*/, const WeightRefetch& /*refetch*/) {
        return {};
    }
};

// A layer's weight and bias as one computation uses them (bias undefined when the layer has none).
struct FetchedWeights {
    at::Tensor weight;
    at::Tensor bias;
};

// Where a layer's frozen weight and bias come from when it computes. Without one, the layer uses
// its parameters where they live. Block swapping (low_vram) keeps the parameters on the host and
// fetches device copies for each forward — and for each recompute under gradient checkpointing —
// which die with the computation that used them; a Linear layer's backward fetches its weight
// once more instead of keeping the forward's copy (host_matmul.h WeightRefetch), so at most the
// layers computing at a moment (and a prefetch's copies ahead) hold device copies. One call per
// layer computation, weight and bias together, so a source that copies ahead (stream prefetch)
// sees the order layers run in.
class WeightSource {
  public:
    virtual ~WeightSource() = default;
    // `weight` and `bias` are the layer's resident parameters (the same tensors every call).
    virtual FetchedWeights fetch(const at::Tensor& weight, const at::Tensor& bias) = 0;
};

class LinearImpl : public torch::nn::Module {
  public:
    LinearImpl(int64_t in_features, int64_t out_features, bool bias = true);
    at::Tensor forward(const at::Tensor& x);

    void set_adapter(std::shared_ptr<LayerAdapter> adapter) { adapter_ = std::move(adapter); }
    const std::shared_ptr<LayerAdapter>& adapter() const { return adapter_; }
    void set_weight_source(std::shared_ptr<WeightSource> s) { source_ = std::move(s); }
    const std::shared_ptr<WeightSource>& weight_source() const { return source_; }
    int64_t in_features() const { return weight.size(1); }
    int64_t out_features() const { return weight.size(0); }

    at::Tensor weight;  // [out, in]
    at::Tensor bias;    // [out] or undefined

  private:
    std::shared_ptr<LayerAdapter> adapter_;
    std::shared_ptr<WeightSource> source_;
};
TORCH_MODULE(Linear);

class Conv2dImpl : public torch::nn::Module {
  public:
    Conv2dImpl(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1,
               int64_t padding = 0, bool bias = true);
    at::Tensor forward(const at::Tensor& x);

    void set_adapter(std::shared_ptr<LayerAdapter> adapter) { adapter_ = std::move(adapter); }
    const std::shared_ptr<LayerAdapter>& adapter() const { return adapter_; }
    void set_weight_source(std::shared_ptr<WeightSource> s) { source_ = std::move(s); }
    const std::shared_ptr<WeightSource>& weight_source() const { return source_; }
    int64_t kernel_size() const { return weight.size(2); }
    int64_t stride() const { return stride_; }
    int64_t padding() const { return padding_; }

    at::Tensor weight;  // [out, in, k, k]
    at::Tensor bias;    // [out] or undefined

  private:
    int64_t stride_;
    int64_t padding_;
    std::shared_ptr<LayerAdapter> adapter_;
    std::shared_ptr<WeightSource> source_;
};
TORCH_MODULE(Conv2d);

}  // namespace loom
