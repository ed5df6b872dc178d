#include "loom/train/low_vram.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <unordered_set>

#include "loom/core/error.h"
#include "loom/core/logging.h"
#include "loom/device/host_memory.h"
#include "loom/model/loading/tensor_file.h"
#include "loom/model/nn/adaptable_layers.h"
#include "train_log.h"

namespace loom {

namespace {

// Every parameter and buffer of `module` to the device (device-resident on sim) or the host,
// except the weights that stream from the host (a tensor keeps its TensorImpl through set_data).
template <class Stays>
void move(torch::nn::Module& module, const Device& device, bool to_device, const Stays& stays) {
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

LayerParts parts_of(torch::nn::Module& m) {
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

LowVramMode::LowVramMode(ModelFamily& model, Device& device, PlacementOptions options)
    : model_(model), device_(device), options_(options) {
    // The model asks before an expert computes; with one denoiser it never does.
    model_.set_expert_placement([this](std::size_t index) { place_expert(index); });
}

LowVramMode::~LowVramMode() {
    model_.set_expert_placement(nullptr);
}

QuantizedFetch* LowVramMode::quantized_source(const torch::nn::Module* layer) const {
    for (const QuantizedLayer& l : quantized_) {
        if (l.module == layer) return l.source.get();
    }
    return nullptr;
}

bool LowVramMode::stays(const at::Tensor& t) const {
    const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    return streamed_.count(impl) != 0 || placeholders_.count(impl) != 0;
}

bool LowVramMode::parked(const at::Tensor& t) const {
    return parked_tensors_.count(t.unsafeGetTensorImpl()) != 0;
}

void LowVramMode::collect_parked() {
    parked_tensors_.clear();
    for (std::size_t i = 0; i < expert_parked_.size(); ++i) {
        if (!expert_parked_[i]) continue;
        torch::nn::Module& expert = *model_.expert(i);
        for (const at::Tensor& p : expert.parameters()) {
            if (!p.requires_grad()) parked_tensors_.insert(p.unsafeGetTensorImpl());
        }
        for (const at::Tensor& b : expert.buffers())
            parked_tensors_.insert(b.unsafeGetTensorImpl());
    }
}

void LowVramMode::move_expert(std::size_t index, bool on_host) {
    move(*model_.expert(index), device_, !on_host,
         [this](const at::Tensor& t) { return t.requires_grad() || stays(t); });
}

// The one that leaves goes first: the device never holds both experts. Bringing one in can run
// out of memory halfway; it stays marked parked, so the retry brings the rest (a tensor already
// on the device is not copied again).
void LowVramMode::place_expert(std::size_t index) {
    if (index != ModelFamily::kEveryExpert) active_expert_ = index;
    if (!idle_expert_on_host_ || !placed_) return;
    for (std::size_t i = 0; i < expert_parked_.size(); ++i) {
        const bool wanted = index == ModelFamily::kEveryExpert || i == index;
        if (!wanted && !expert_parked_[i]) {
            move_expert(i, /*on_host=*/true);
            expert_parked_[i] = true;
        }
    }
    for (std::size_t i = 0; i < expert_parked_.size(); ++i) {
        const bool wanted = index == ModelFamily::kEveryExpert || i == index;
        if (wanted && expert_parked_[i]) {
            move_expert(i, /*on_host=*/false);
            expert_parked_[i] = false;
        }
    }
    collect_parked();
}

void LowVramMode::set_idle_expert_on_host(bool on) {
    const std::size_t experts = model_.expert_spans().size();
    if (on == idle_expert_on_host_ || experts < 2) {
        idle_expert_on_host_ = on;
        return;
    }
    if (!on) {
        // Every expert back on the device (once placed; before, placement puts them there).
        for (std::size_t i = 0; i < expert_parked_.size(); ++i) {
            if (expert_parked_[i] && placed_) move_expert(i, /*on_host=*/false);
            expert_parked_[i] = false;
        }
        idle_expert_on_host_ = false;
        collect_parked();
        low_vram_log().info("every {} expert on the device", config::to_string(model_.arch()));
        return;
    }
    if (!active_expert_) {
        const std::vector<bool> trained = model_.trained_experts();
        const auto first = std::find(trained.begin(), trained.end(), true);
        active_expert_ = first == trained.end() ? 0 : std::size_t(first - trained.begin());
    }
    expert_parked_.assign(experts, false);
    for (std::size_t i = 0; i < experts; ++i) {
        if (i == *active_expert_) continue;
        if (placed_) move_expert(i, /*on_host=*/true);
        expert_parked_[i] = true;
    }
    idle_expert_on_host_ = true;
    collect_parked();
    int64_t bytes = 0;
    for (const c10::TensorImpl* t : parked_tensors_) {
        if (!streamed_.count(t) && !placeholders_.count(t)) bytes += t->storage().nbytes();
    }
    low_vram_log().info(
        "the idle {} expert waits on the host ({:.1f} MiB); an expert comes to the device for its "
        "turn and its previews",
        config::to_string(model_.arch()), static_cast<double>(bytes) / (1 << 20));
}

void LowVramMode::encoders_to(bool device) {
    for (torch::nn::Module* m : model_.encoders()) {
        move(*m, device_, device, [this](const at::Tensor& t) { return stays(t); });
    }
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

void LowVramMode::place_model(int level) {
    if (options_.channels_last) {
        // Still host-resident: converted where it lies, and every copy placement makes keeps it.
        HostAllocations host;
        model_.set_channels_last(true);
        low_vram_log().info("{} convolutions in channels-last memory format",
                            config::to_string(model_.arch()));
    }
    if (level >= 2) reduce_base(false);  // still host-resident: the device never sees float32
    // Streamed block weights never visit the device: loading must fit where training does, or
    // the load phase's ladder (which raises low_vram) could not help.
    if (level >= 3) stream_blocks();
    collect_parked();
    move(model_.denoiser(), device_, true,
         [this](const at::Tensor& t) { return stays(t) || parked(t); });
    if (level < 1) encoders_to(true);
    level_ = level;
    placed_ = true;
}

void LowVramMode::keep_originals(bool keep) {
    keep_originals_ = keep;
    if (!keep) originals_.clear();
}

void LowVramMode::restore_originals() {
    torch::NoGradGuard no_grad;
    // The quantized layers compute with their weights again; their codes go.
    for (QuantizedLayer& l : quantized_) {
        parts_of(*l.module).set_source(nullptr);
        QuantizedWeight& q = l.source->weight();
        for (at::Tensor* t : {&q.data, &q.scale, &q.minimum}) {
            if (t->defined()) t->set_data(at::empty({0}, t->options().device(t->device())));
        }
    }
    quantized_.clear();
    placeholders_.clear();
    // Each where it lives now: the placed denoiser's on the device, except a parked expert's.
    std::unordered_set<const c10::TensorImpl*> denoiser;
    for (const at::Tensor& p : model_.denoiser().parameters()) {
        denoiser.insert(p.unsafeGetTensorImpl());
    }
    for (Original& o : originals_) {
        const bool on_device =
            denoiser.count(o.param.unsafeGetTensorImpl()) != 0 && !parked(o.param);
        // One tensor at a time: the float32 copy arrives, then the bf16 one is released.
        o.param.set_data(on_device ? device_.to_device(o.full) : o.full);
    }
    low_vram_log().info("frozen base weights back in float32 ({} tensors)", originals_.size());
    originals_.clear();
}

void LowVramMode::set_level(int level) {
    if (level < level_) {
        if (level_ >= 2 && level < 2 && originals_.empty()) {
            throw Error("low_vram cannot go below 2 during a run (from " + std::to_string(level_) +
                        " to " + std::to_string(level) +
                        "): the float32 base weights were not kept");
        }
        if (level_ == 3) unstream_blocks();
        if (level_ >= 2 && level < 2) restore_originals();
        if (level_ >= 1 && level < 1 && encoder_scopes_ == 0) encoders_to(true);
        level_ = level;
        collect_parked();
        return;
    }
    if (level_ < 1 && level >= 1 && encoder_scopes_ == 0) encoders_to(false);
    if (level_ < 2 && level >= 2) reduce_base(true);  // the denoiser is on the device by now
    if (level_ < 3 && level >= 3) stream_blocks();
    level_ = level;
    collect_parked();
}

// Running out of memory while the encoders move in (the cache phase on a tight device) must
// leave them on the host and the scope count as it was: otherwise they stay on the device for
// the rest of the run, no later scope moves them back, and every measurement after sees less room.
LowVramMode::EncodersOnDevice::EncodersOnDevice(LowVramMode& mode)
    : mode_(mode), active_(mode.level_ >= 1) {
    if (!active_) return;
    if (mode_.encoder_scopes_ == 0) {
        try {
            mode_.encoders_to(true);
        } catch (...) {
            mode_.encoders_to(false);
            throw;
        }
    }
    ++mode_.encoder_scopes_;
}

LowVramMode::EncodersOnDevice::~EncodersOnDevice() {
    if (active_ && --mode_.encoder_scopes_ == 0) mode_.encoders_to(false);
}

}  // namespace loom
