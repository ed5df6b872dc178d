#include "loom/train/low_vram.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <algorithm>

#include "loom/core/error.h"
#include "loom/core/logging.h"
#include "loom/device/host_memory.h"
#include "low_vram_parts.h"
#include "quantized_fetch.h"
#include "train_log.h"

namespace loom {

using low_vram_detail::LayerParts;
using low_vram_detail::move;
using low_vram_detail::parts_of;

LowVramMode::LowVramMode(ModelFamily& model, Device& device, PlacementOptions options)
    : model_(model), device_(device), options_(options) {
    // The model asks before an expert computes; with one denoiser it never does.
    model_.set_expert_placement([this](std::size_t index) { place_expert(index); });
}

LowVramMode::~LowVramMode() {
    model_.set_expert_placement(nullptr);
}

bool LowVramMode::stays(const at::Tensor& t) const {
    const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    return streamed_.count(impl) != 0 || placeholders_.count(impl) != 0;
}

void LowVramMode::encoders_to(bool device) {
    for (torch::nn::Module* m : model_.encoders()) {
        move(*m, device_, device, [this](const at::Tensor& t) { return stays(t); });
    }
}

void LowVramMode::place_model(int level, int streamed_blocks) {
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
    if (level >= 3) set_streamed_blocks(streamed_blocks);
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

void LowVramMode::set_level(int level, int streamed_blocks) {
    if (level < level_) {
        if (level_ >= 2 && level < 2 && originals_.empty()) {
            throw Error("low_vram cannot go below 2 during a run (from " + std::to_string(level_) +
                        " to " + std::to_string(level) +
                        "): the float32 base weights were not kept");
        }
        if (level_ == 3) stream_first(0);
        if (level_ >= 2 && level < 2) restore_originals();
        if (level_ >= 1 && level < 1 && encoder_scopes_ == 0) encoders_to(true);
        level_ = level;
        collect_parked();
        return;
    }
    if (level_ < 1 && level >= 1 && encoder_scopes_ == 0) encoders_to(false);
    if (level_ < 2 && level >= 2) reduce_base(true);       // the denoiser is on the device by now
    if (level >= 3) set_streamed_blocks(streamed_blocks);  // more or fewer at level 3
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
