// The idle expert on the host (train/low_vram.h): a denoiser of experts keeps the experts that do
// not compute in host memory.
#include <ATen/ATen.h>
#include <torch/torch.h>

#include <algorithm>

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

}  // namespace loom
