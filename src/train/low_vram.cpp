#include "loom/train/low_vram.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <unordered_set>

#include "loom/core/error.h"
#include "loom/core/logging.h"
#include "loom/device/host_memory.h"
#include "loom/model/adaptable_layers.h"

namespace loom {

namespace {

const Logger& log() {
    static const Logger l = logger("low_vram");
    return l;
}

// Every parameter and buffer of `module` to the device (device-resident on sim) or the host,
// except the weights that stream from the host (a tensor keeps its TensorImpl through set_data).
void move(torch::nn::Module& module, const Device& device, bool to_device,
          const std::unordered_set<const c10::TensorImpl*>& streamed = {}) {
    torch::NoGradGuard no_grad;
    for (auto& p : module.parameters()) {
        if (streamed.count(p.unsafeGetTensorImpl()) != 0) continue;
        p.set_data(to_device ? device.to_device(p.data()) : device.to_host(p.data()));
    }
    for (auto& b : module.buffers()) {
        b.set_data(to_device ? device.to_device(b.data()) : device.to_host(b.data()));
    }
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

void LowVramMode::encoders_to(bool device) {
    for (torch::nn::Module* m : model_.encoders()) move(*m, device_, device);
}

// Converts on the host, one tensor at a time: a device-resident weight goes to the host, is
// converted there, lets go of its float32 device copy and comes back in bf16 — the device never
// holds both copies, so raising the level when memory has just run out cannot itself run out.
void LowVramMode::base_to_bf16(bool denoiser_on_device) {
    torch::NoGradGuard no_grad;
    std::size_t converted = 0;
    std::vector<torch::nn::Module*> modules = model_.encoders();
    modules.insert(modules.begin(), &model_.denoiser());
    for (torch::nn::Module* m : modules) {
        const bool on_device = denoiser_on_device && m == &model_.denoiser();
        for (auto& p : m->parameters()) {
            // Frozen base weights only: the LoRA's own parameters train in float32.
            if (p.requires_grad() || p.scalar_type() != at::kFloat) continue;
            at::Tensor half;
            {
                HostAllocations host;
                at::Tensor full = on_device ? device_.to_host(p.data()) : p.data();
                half = full.to(at::kBFloat16);
                if (keep_originals_) originals_.push_back({p, full, on_device});
            }
            p.set_data(half);  // the float32 copy is released here (kept on the host above)
            if (on_device) p.set_data(device_.to_device(half));
            ++converted;
        }
    }
    log().info("frozen base weights held in bf16 ({} tensors); LoRA and optimizer stay float32",
               converted);
}

void LowVramMode::stream_blocks() {
    torch::NoGradGuard no_grad;
    struct Streamed {
        torch::nn::Module* module;
        at::Tensor* weight;
        at::Tensor* bias;
    };
    std::vector<Streamed> layers;
    for (const auto& item : model_.denoiser().named_modules("", /*include_self=*/false)) {
        if (!model_.streams_weights_of(item.key())) continue;
        torch::nn::Module& m = *item.value();
        if (auto* linear = dynamic_cast<LinearImpl*>(&m)) {
            layers.push_back({&m, &linear->weight, &linear->bias});
        } else if (auto* conv = dynamic_cast<Conv2dImpl*>(&m)) {
            layers.push_back({&m, &conv->weight, &conv->bias});
        }
    }
    std::shared_ptr<WeightSource> source;
    if (options_.stream_prefetch) {
        prefetch_ = std::make_shared<PrefetchingWeightSource>(device_, layers.size());
        source = prefetch_;
    } else {
        source = std::make_shared<DeviceFetch>(device_);
    }
    for (const Streamed& l : layers) {
        streamed_layers_.push_back(l.module);
        if (auto* linear = dynamic_cast<LinearImpl*>(l.module)) linear->set_weight_source(source);
        if (auto* conv = dynamic_cast<Conv2dImpl*>(l.module)) conv->set_weight_source(source);
        l.weight->set_data(device_.to_host(l.weight->data()));
        streamed_.insert(l.weight->unsafeGetTensorImpl());
        if (l.bias->defined()) {
            l.bias->set_data(device_.to_host(l.bias->data()));
            streamed_.insert(l.bias->unsafeGetTensorImpl());
        }
    }
    log().info(
        "{} {} block layers stream their weights from the host{}", layers.size(), model_.arch(),
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
        at::Tensor* weight = nullptr;
        at::Tensor* bias = nullptr;
        if (auto* linear = dynamic_cast<LinearImpl*>(m)) {
            weight = &linear->weight;
            bias = &linear->bias;
        } else if (auto* conv = dynamic_cast<Conv2dImpl*>(m)) {
            weight = &conv->weight;
            bias = &conv->bias;
        }
        if (weight == nullptr) continue;
        copies.emplace_back(weight, device_.to_device(weight->data()));
        if (bias->defined()) copies.emplace_back(bias, device_.to_device(bias->data()));
    }
    for (auto& [tensor, copy] : copies) tensor->set_data(copy);
    for (torch::nn::Module* m : streamed_layers_) {
        if (auto* linear = dynamic_cast<LinearImpl*>(m)) linear->set_weight_source(nullptr);
        if (auto* conv = dynamic_cast<Conv2dImpl*>(m)) conv->set_weight_source(nullptr);
    }
    log().info("{} {} block layers hold their weights on the device again", streamed_layers_.size(),
               model_.arch());
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
        log().info("{} convolutions in channels-last memory format", model_.arch());
    }
    if (level >= 2) base_to_bf16(false);  // still host-resident: the device never sees float32
    // Streamed block weights never visit the device: loading must fit where training does, or
    // the load phase's ladder (which raises low_vram) could not help.
    if (level >= 3) stream_blocks();
    move(model_.denoiser(), device_, true, streamed_);
    if (level < 1) encoders_to(true);
    level_ = level;
}

void LowVramMode::keep_originals(bool keep) {
    keep_originals_ = keep;
    if (!keep) originals_.clear();
}

void LowVramMode::restore_originals() {
    torch::NoGradGuard no_grad;
    for (Original& o : originals_) {
        // One tensor at a time: the float32 copy arrives, then the bf16 one is released.
        o.param.set_data(o.on_device ? device_.to_device(o.full) : o.full);
    }
    log().info("frozen base weights back in float32 ({} tensors)", originals_.size());
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
        return;
    }
    if (level_ < 1 && level >= 1 && encoder_scopes_ == 0) encoders_to(false);
    if (level_ < 2 && level >= 2) base_to_bf16(true);  // the denoiser is on the device by now
    if (level_ < 3 && level >= 3) stream_blocks();
    level_ = level;
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
