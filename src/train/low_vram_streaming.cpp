// low_vram's block streaming (train/low_vram.h): the denoiser's block weights on the host, a
// device copy fetched for each computation.
#include <ATen/ATen.h>
#include <torch/torch.h>

#include "loom/core/error.h"
#include "loom/core/logging.h"
#include "loom/device/host_memory.h"
#include "loom/train/low_vram.h"
#include "low_vram_parts.h"
#include "quantized_fetch.h"
#include "train_log.h"

namespace loom {

using low_vram_detail::LayerParts;
using low_vram_detail::move;
using low_vram_detail::parts_of;

namespace {

// Device copies of a host-resident layer's weights, made for one computation when it runs.
class DeviceFetch final : public WeightSource {
  public:
    explicit DeviceFetch(const Device& device) : device_(device) {}
    FetchedWeights fetch(const at::Tensor& weight, const at::Tensor& bias) override {
        return {device_.to_device(weight), bias.defined() ? device_.to_device(bias) : bias};
    }

  private:
    const Device& device_;
};

}  // namespace

void LowVramMode::stream_blocks() {
    torch::NoGradGuard no_grad;
    std::vector<std::pair<torch::nn::Module*, LayerParts>> layers;
    for (const auto& item : model_.denoiser().named_modules("", /*include_self=*/false)) {
        if (!model_.blocks().contains(item.key())) continue;
        LayerParts parts = parts_of(*item.value());
        if (parts.weight != nullptr) layers.emplace_back(item.value().get(), std::move(parts));
    }
    std::shared_ptr<WeightSource> source;
    if (options_.stream_prefetch) {
        prefetch_ = std::make_shared<PrefetchingWeightSource>(device_, layers.size());
        source = prefetch_;
    } else {
        source = std::make_shared<DeviceFetch>(device_);
    }
    for (auto& [module, l] : layers) {
        streamed_layers_.push_back(module);
        if (QuantizedFetch* q = quantized_source(module)) {
            // Its codes and scales stream instead of a weight; the placeholder stays put.
            for (at::Tensor* t : {&q->weight().data, &q->weight().scale, &q->weight().minimum}) {
                if (!t->defined()) continue;
                t->set_data(device_.to_host(t->data()));
                streamed_.insert(t->unsafeGetTensorImpl());
            }
            q->stream_through(source);
        } else {
            l.set_source(source);
            l.weight->set_data(device_.to_host(l.weight->data()));
            streamed_.insert(l.weight->unsafeGetTensorImpl());
        }
        if (l.bias->defined()) {
            l.bias->set_data(device_.to_host(l.bias->data()));
            streamed_.insert(l.bias->unsafeGetTensorImpl());
        }
    }
    low_vram_log().info(
        "{} {} block layers stream their weights from the host{}", layers.size(),
        config::to_string(model_.arch()),
        prefetch_ ? format(" ({} layers copied ahead of use)", PrefetchingWeightSource::kDepth)
                  : std::string());
}

// All or nothing: every device copy is made before any layer changes, so running out of memory
// here (the measured choice tries it on a tight device) leaves level 3 exactly as it was.
void LowVramMode::unstream_blocks() {
    torch::NoGradGuard no_grad;
    if (prefetch_) prefetch_->drop();
    std::vector<std::pair<at::Tensor*, at::Tensor>> copies;
    for (torch::nn::Module* m : streamed_layers_) {
        const LayerParts parts = parts_of(*m);
        at::Tensor* weight = parts.weight;
        at::Tensor* bias = parts.bias;
        if (weight == nullptr) continue;
        // A parked expert's weights stop streaming and wait on the host with the rest of it.
        const auto copy = [&](at::Tensor* t) {
            if (t->defined() && !parked(*t)) copies.emplace_back(t, device_.to_device(t->data()));
        };
        if (QuantizedFetch* q = quantized_source(m)) {
            for (at::Tensor* t : {&q->weight().data, &q->weight().scale, &q->weight().minimum}) {
                copy(t);
            }
        } else {
            copy(weight);
        }
        copy(bias);
    }
    for (auto& [tensor, copy] : copies) tensor->set_data(copy);
    for (torch::nn::Module* m : streamed_layers_) {
        if (QuantizedFetch* q = quantized_source(m)) {
            q->stream_through(nullptr);
        } else {
            parts_of(*m).set_source(nullptr);
        }
    }
    low_vram_log().info("{} {} block layers hold their weights on the device again",
                        streamed_layers_.size(), config::to_string(model_.arch()));
    streamed_layers_.clear();
    streamed_.clear();
    prefetch_.reset();
}

void LowVramMode::drop_prefetched() {
    if (prefetch_) prefetch_->drop();
}

std::optional<PrefetchingWeightSource::Stats> LowVramMode::prefetch_stats() const {
    if (!prefetch_) return std::nullopt;
    return prefetch_->stats();
}

}  // namespace loom
