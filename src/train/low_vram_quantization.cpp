// low_vram level 2: the frozen base quantized (train/low_vram.h), its codes kept for a restart.
#include <ATen/ATen.h>
#include <torch/torch.h>

#include <map>

#include "loom/core/error.h"
#include "loom/core/logging.h"
#include "loom/device/host_memory.h"
#include "loom/model/loading/tensor_file.h"
#include "loom/train/low_vram.h"
#include "low_vram_parts.h"
#include "quantized_fetch.h"
#include "train_log.h"

namespace loom {

using low_vram_detail::LayerParts;
using low_vram_detail::move;
using low_vram_detail::parts_of;

namespace {

// Names of the buffers a quantized layer holds its weight in.
constexpr const char* kCodes = "weight_codes";
constexpr const char* kScale = "weight_scale";
constexpr const char* kMinimum = "weight_minimum";

// `value` as the layer's buffer `name` (registered the first time, its data replaced after);
// returns the buffer.
at::Tensor put_buffer(torch::nn::Module& layer, const char* name, const at::Tensor& value) {
    auto existing = layer.named_buffers(false);
    if (at::Tensor* b = existing.find(name)) {
        b->set_data(value);
        return *b;
    }
    return layer.register_buffer(name, value);
}

}  // namespace

QuantizedFetch* LowVramMode::quantized_source(const torch::nn::Module* layer) const {
    for (const QuantizedLayer& l : quantized_) {
        if (l.module == layer) return l.source.get();
    }
    return nullptr;
}

// Converts on the host, one tensor at a time: a device-resident weight goes to the host, is
// converted there, lets go of its float32 device copy and comes back quantized or in bf16 — the
// device never holds both copies, so raising the level when memory has just run out cannot
// itself run out.
void LowVramMode::reduce_base(bool denoiser_on_device) {
    torch::NoGradGuard no_grad;
    std::size_t converted = 0;
    const std::size_t quantized_before = quantized_.size();
    const std::map<std::string, at::Tensor> cached = read_quantized_cache();
    std::vector<std::pair<std::string, at::Tensor>> kept;  // every layer's codes, for the file
    bool quantized_anew = false;
    std::vector<torch::nn::Module*> modules = model_.encoders();
    modules.insert(modules.begin(), &model_.denoiser());
    for (std::size_t index = 0; index < modules.size(); ++index) {
        torch::nn::Module* m = modules[index];
        const bool denoiser = m == &model_.denoiser();
        const std::string prefix = denoiser ? "denoiser." : format("encoder{}.", index - 1);
        // A parked expert's tensors are converted where they wait, on the host.
        const bool on_device = denoiser_on_device && denoiser;
        const std::optional<QType> qtype =
            denoiser ? std::optional<QType>(options_.base_qtype) : options_.encoder_qtype;
        if (qtype) {
            for (const auto& item : m->named_modules("", /*include_self=*/false)) {
                const LayerParts parts = parts_of(*item.value());
                // Frozen weights only: the LoRA's own parameters train in float32.
                if (parts.weight == nullptr || parts.weight->requires_grad() ||
                    !parts.weight->is_floating_point() || stays(*parts.weight)) {
                    continue;
                }
                quantized_anew |= quantize_layer(*item.value(), *parts.weight, *qtype,
                                                 on_device && !parked(*parts.weight),
                                                 prefix + item.key(), cached, kept);
            }
        }
        for (auto& p : m->parameters()) {
            if (p.requires_grad() || p.scalar_type() != at::kFloat || stays(p)) continue;
            const bool here = on_device && !parked(p);
            at::Tensor half;
            {
                HostAllocations host;
                at::Tensor full = here ? device_.to_host(p.data()) : p.data();
                half = full.to(at::kBFloat16);
                if (keep_originals_) originals_.push_back({p, full});
            }
            p.set_data(half);  // the float32 copy is released here (kept on the host above)
            if (here) p.set_data(device_.to_device(half));
            ++converted;
        }
    }
    // Rewritten whole when any layer was quantized anew, so the file never loses the others.
    if (quantized_anew) write_quantized_cache(kept);
    collect_parked();  // the parked experts' new codes and scales
    int64_t bytes = 0;
    for (std::size_t i = quantized_before; i < quantized_.size(); ++i) {
        bytes += quantized_[i].source->bytes();
    }
    low_vram_log().info(
        "frozen base: {} Linear/Conv2d weights quantized ({} for {}{}, {:.1f} MiB), {} tensors "
        "in bf16; LoRA and optimizer stay float32",
        quantized_.size() - quantized_before, to_string(options_.base_qtype),
        config::to_string(model_.arch()),
        options_.encoder_qtype
            ? format(", {} for the text encoders", to_string(*options_.encoder_qtype))
            : std::string(),
        static_cast<double>(bytes) / (1 << 20), converted);
}

// The codes a previous run kept for this model and these qtypes, by layer key; empty without a
// cache file, or (with a warning) when it cannot be read.
std::map<std::string, at::Tensor> LowVramMode::read_quantized_cache() const {
    std::map<std::string, at::Tensor> cached;
    std::error_code ec;
    if (options_.quantized_cache.empty() ||
        !std::filesystem::exists(options_.quantized_cache, ec)) {
        return cached;
    }
    try {
        HostAllocations host;
        for (auto& [name, t] : read_all_tensors(options_.quantized_cache)) cached[name] = t;
        low_vram_log().info("quantized weights read from {}", options_.quantized_cache.string());
    } catch (const Error& e) {
        low_vram_log().warn("{}; quantizing again", e.what());
        cached.clear();
    }
    return cached;
}

void LowVramMode::write_quantized_cache(
    const std::vector<std::pair<std::string, at::Tensor>>& kept) const {
    if (options_.quantized_cache.empty() || kept.empty()) return;
    try {
        std::filesystem::create_directories(options_.quantized_cache.parent_path());
        write_tensors(options_.quantized_cache, kept);
        low_vram_log().info("quantized weights kept in {}", options_.quantized_cache.string());
    } catch (const Error& e) {
        // Only the next restart's time is at stake: training goes on.
        low_vram_log().warn("quantized weights not kept: {}", e.what());
    }
}

bool LowVramMode::quantize_layer(torch::nn::Module& layer, at::Tensor& weight, QType qtype,
                                 bool on_device, const std::string& key,
                                 const std::map<std::string, at::Tensor>& cached,
                                 std::vector<std::pair<std::string, at::Tensor>>& kept) {
    bool anew = false;
    QuantizedWeight q;
    at::ScalarType dtype;
    const bool channels_last = weight.dim() == 4 && weight.size(2) * weight.size(3) > 1 &&
                               weight.is_contiguous(at::MemoryFormat::ChannelsLast);
    {
        HostAllocations host;
        at::Tensor full = on_device ? device_.to_host(weight.data()) : weight.data();
        const auto codes = cached.find(key + ".codes");
        if (codes != cached.end() && cached.count(key + ".scale") != 0) {
            q.qtype = qtype;
            q.shape = full.sizes().vec();
            q.data = codes->second;
            q.scale = cached.at(key + ".scale");
            if (cached.count(key + ".minimum") != 0) q.minimum = cached.at(key + ".minimum");
        }
        if (!has_quantized_layout(q)) {
            // Not cached, or cached in another layout (an older loom grouped uint4 otherwise).
            q = quantize_weight(full, qtype);
            anew = true;
        }
        kept.emplace_back(key + ".codes", q.data);
        kept.emplace_back(key + ".scale", q.scale);
        if (q.minimum.defined()) kept.emplace_back(key + ".minimum", q.minimum);
        // float32 layers compute in bf16 at this level, as the rest of the base; others as held.
        dtype = full.scalar_type() == at::kFloat ? at::kBFloat16 : full.scalar_type();
        if (keep_originals_) originals_.push_back({weight, full});
    }
    // A one-element placeholder of the weight's shape: shapes still read right, nothing is held.
    weight.set_data(at::zeros({1}, at::TensorOptions().dtype(dtype)).expand(q.shape));
    placeholders_.insert(weight.unsafeGetTensorImpl());
    auto place = [&](const char* name, at::Tensor& t) {
        if (t.defined()) t = put_buffer(layer, name, on_device ? device_.to_device(t) : t);
    };
    place(kCodes, q.data);
    place(kScale, q.scale);
    place(kMinimum, q.minimum);
    auto source = std::make_shared<QuantizedFetch>(device_, std::move(q), dtype, channels_last);
    parts_of(layer).set_source(source);
    quantized_.push_back({&layer, source});
    return anew;
}

}  // namespace loom
