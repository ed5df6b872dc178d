// low_vram's block streaming (train/low_vram.h): the weights of the first N blocks of the
// streaming order on the host, a device copy fetched for each computation; the other blocks
// resident.
#include <ATen/ATen.h>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "loom/core/byte_size.h"
#include "loom/core/error.h"
#include "loom/core/logging.h"
#include "loom/device/host_memory.h"
#include "loom/train/low_vram.h"
#include "low_vram_parts.h"
#include "quantized_fetch.h"
#include "train_log.h"

namespace loom {

using low_vram_detail::LayerParts;
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

// The block a layer's module path lies in: the family's prefix and, when the next component is an
// index, that index ("transformer_blocks.3."); a prefix without one ("mid_block.") is one block.
// Empty outside the blocks.
std::string block_of(const DenoiserBlocks& blocks, const std::string& path) {
    for (const std::string& prefix : blocks.prefixes) {
        if (path.compare(0, prefix.size(), prefix) != 0) continue;
        const std::size_t dot = path.find('.', prefix.size());
        if (dot == std::string::npos) return prefix;
        const std::string next = path.substr(prefix.size(), dot - prefix.size());
        const bool index = !next.empty() && std::all_of(next.begin(), next.end(), [](char c) {
            return std::isdigit(static_cast<unsigned char>(c)) != 0;
        });
        return index ? prefix + next + "." : prefix;
    }
    return {};
}

std::uint64_t nbytes(const at::Tensor& t) {
    return t.defined() ? static_cast<std::uint64_t>(t.numel()) * t.element_size() : 0;
}

// The bytes level 2 holds a weight in, codes and scales (model/nn/quantized_weight.h's layouts),
// for a layer not quantized yet: the ladder weighs blocks at level 2's sizes before it gets there
// (a load that fails at level 2 streams blocks counted in their quantized bytes).
std::uint64_t quantized_nbytes(const at::Tensor& weight, QType qtype) {
    const std::int64_t out = weight.size(0);
    const std::int64_t rest = weight.numel() / std::max<std::int64_t>(out, 1);
    if (qtype == QType::kUInt4) {
        const std::int64_t groups = rest / uint4_group_size(rest);
        return static_cast<std::uint64_t>(out * ((rest + 1) / 2) + out * groups * 2 * 2);
    }
    return static_cast<std::uint64_t>(out * rest + out * 4);
}

// What level 2 keeps of a bias or other frozen tensor: bf16.
std::uint64_t bf16_nbytes(const at::Tensor& t) {
    return t.defined() ? static_cast<std::uint64_t>(t.numel()) * 2 : 0;
}

}  // namespace

std::vector<LowVramMode::StreamBlock>& LowVramMode::stream_order() {
    if (!stream_order_.empty()) return stream_order_;
    std::vector<StreamBlock> declared;  // in the family's order (the modules' registration)
    std::map<std::string, std::size_t> index;
    for (const auto& item : model_.denoiser().named_modules("", /*include_self=*/false)) {
        const std::string block = block_of(model_.blocks(), item.key());
        if (block.empty() || parts_of(*item.value()).weight == nullptr) continue;
        const auto [at, added] = index.emplace(block, declared.size());
        if (added) declared.push_back({block, {}});
        declared[at->second].layers.push_back(item.value().get());
    }
    // The largest blocks first: each streamed block costs its bytes in copies every pass whichever
    // it is, and a fixed cost per layer fetched, so the fewest blocks that free what the device
    // lacks are the largest ones (Flux: a double block is twice a single one). Among equal blocks
    // the last first, as musubi-tuner's blocks_to_swap takes them.
    std::reverse(declared.begin(), declared.end());
    std::stable_sort(declared.begin(), declared.end(),
                     [this](const StreamBlock& a, const StreamBlock& b) {
                         return block_bytes(a) > block_bytes(b);
                     });
    stream_order_ = std::move(declared);
    if (!stream_order_.empty()) {
        low_vram_log().info(
            "{} {} blocks stream in this order when block streaming keeps some on the device: "
            "the largest first ({} first, {}), the last first among equal ones",
            stream_order_.size(), config::to_string(model_.arch()), stream_order_.front().name,
            format_bytes_human(block_bytes(stream_order_.front())));
    }
    return stream_order_;
}

std::uint64_t LowVramMode::block_bytes(const StreamBlock& block) const {
    std::uint64_t bytes = 0;
    for (torch::nn::Module* m : block.layers) {
        const LayerParts parts = parts_of(*m);
        const QuantizedFetch* q = quantized_source(m);
        bytes += q != nullptr ? static_cast<std::uint64_t>(q->bytes()) + nbytes(*parts.bias)
                              : quantized_nbytes(*parts.weight, options_.base_qtype) +
                                    bf16_nbytes(*parts.bias);
    }
    return bytes;
}

LowVramMode::StreamFacts LowVramMode::stream_facts() {
    StreamFacts facts;
    std::uint64_t largest_fetch = 0;
    for (const StreamBlock& block : stream_order()) {
        facts.block_bytes.push_back(block_bytes(block));
        for (torch::nn::Module* m : block.layers) {
            const LayerParts parts = parts_of(*m);
            // A quantized layer's fetch holds its codes' copy and the weight they dequantize to.
            const QuantizedFetch* q = quantized_source(m);
            std::uint64_t fetch = nbytes(*parts.bias);
            if (q != nullptr) {
                std::int64_t numel = 1;
                for (std::int64_t d : q->shape()) numel *= d;
                fetch += static_cast<std::uint64_t>(q->bytes()) +
                         static_cast<std::uint64_t>(numel) * c10::elementSize(q->dtype());
            } else {  // not quantized yet: as level 2 will fetch it
                fetch += quantized_nbytes(*parts.weight, options_.base_qtype) +
                         static_cast<std::uint64_t>(parts.weight->numel()) * 2;
            }
            largest_fetch = std::max(largest_fetch, fetch);
        }
    }
    const std::size_t depth = options_.stream_prefetch ? PrefetchingWeightSource::kDepth : 0;
    facts.overhead = largest_fetch * (depth + 1);
    return facts;
}

int LowVramMode::streamed_blocks() const {
    return static_cast<int>(streaming_);
}

// Blocks that stop streaming come back all or nothing: every device copy is made before any
// layer changes, so running out of memory here (the measured choice tries it on a tight device,
// scale-up probes it) leaves the streaming exactly as it was. Then the source every streamed layer
// fetches through is made anew for their count, and the blocks that start streaming leave the
// device.
void LowVramMode::stream_first(std::size_t count) {
    torch::NoGradGuard no_grad;
    std::vector<StreamBlock>& order = stream_order();
    count = std::min(count, order.size());
    if (count == streaming_ && (count == 0 || source_)) return;
    const auto each_tensor = [this](torch::nn::Module* m, const auto& f) {
        const LayerParts parts = parts_of(*m);
        if (QuantizedFetch* q = quantized_source(m)) {
            for (at::Tensor* t : {&q->weight().data, &q->weight().scale, &q->weight().minimum}) {
                if (t->defined()) f(t);
            }
        } else {
            f(parts.weight);
        }
        if (parts.bias->defined()) f(parts.bias);
    };
    std::vector<std::pair<at::Tensor*, at::Tensor>> copies;
    for (std::size_t i = count; i < streaming_; ++i) {
        for (torch::nn::Module* m : order[i].layers) {
            // A parked expert's weights stop streaming and wait on the host with the rest of it.
            each_tensor(m, [&](at::Tensor* t) {
                if (!parked(*t)) copies.emplace_back(t, device_.to_device(t->data()));
            });
        }
    }
    if (prefetch_) prefetch_->drop();
    for (auto& [tensor, copy] : copies) tensor->set_data(copy);
    for (std::size_t i = count; i < streaming_; ++i) {
        for (torch::nn::Module* m : order[i].layers) {
            each_tensor(m, [&](at::Tensor* t) { streamed_.erase(t->unsafeGetTensorImpl()); });
            if (QuantizedFetch* q = quantized_source(m)) {
                q->stream_through(nullptr);
            } else {
                parts_of(*m).set_source(nullptr);
            }
        }
    }
    std::size_t layers = 0;
    for (std::size_t i = 0; i < count; ++i) layers += order[i].layers.size();
    prefetch_.reset();
    source_.reset();
    if (count > 0 && options_.stream_prefetch) {
        prefetch_ = std::make_shared<PrefetchingWeightSource>(device_, layers);
        source_ = prefetch_;
    } else if (count > 0) {
        source_ = std::make_shared<DeviceFetch>(device_);
    }
    for (std::size_t i = 0; i < count; ++i) {
        for (torch::nn::Module* m : order[i].layers) {
            if (i >= streaming_) {
                each_tensor(m, [&](at::Tensor* t) {
                    t->set_data(device_.to_host(t->data()));
                    streamed_.insert(t->unsafeGetTensorImpl());
                });
            }
            // Its codes and scales stream instead of a weight; the placeholder stays put.
            if (QuantizedFetch* q = quantized_source(m)) {
                q->stream_through(source_);
            } else {
                parts_of(*m).set_source(source_);
            }
        }
    }
    const std::size_t before = streaming_;
    streaming_ = count;
    if (count == 0) {
        low_vram_log().info("every {} block holds its weights on the device again ({} streamed)",
                            config::to_string(model_.arch()), before);
        return;
    }
    low_vram_log().info(
        "{} of {} {} blocks ({} layers) stream their weights from the host{}", count, order.size(),
        config::to_string(model_.arch()), layers,
        prefetch_ ? format(" ({} layers copied ahead of use)", PrefetchingWeightSource::kDepth)
                  : std::string());
}

void LowVramMode::set_streamed_blocks(int count) {
    stream_first(count == 0 ? stream_order().size() : static_cast<std::size_t>(count));
}

void LowVramMode::drop_prefetched() {
    if (prefetch_) prefetch_->drop();
}

std::optional<PrefetchingWeightSource::Stats> LowVramMode::prefetch_stats() const {
    if (!prefetch_) return std::nullopt;
    return prefetch_->stats();
}

}  // namespace loom
