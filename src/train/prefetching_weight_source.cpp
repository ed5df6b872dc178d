#include "loom/train/prefetching_weight_source.h"

#include <c10/util/Exception.h>

#include <algorithm>

#include "loom/core/logging.h"
#include "train_log.h"

namespace loom {

namespace {

const void* data_of(const at::Tensor& t) {
    return t.defined() ? t.data_ptr() : nullptr;
}

}  // namespace

PrefetchingWeightSource::PrefetchingWeightSource(const Device& device, std::size_t layer_count,
                                                 std::size_t depth)
    : device_(device), depth_(depth), order_(layer_count) {}

FetchedWeights PrefetchingWeightSource::direct(const Resident& r) const {
    return {device_.to_device(r.weight), r.bias.defined() ? device_.to_device(r.bias) : r.bias};
}

bool PrefetchingWeightSource::serves(const Prefetched& p, const Resident& r) const {
    return p.key == r.weight.unsafeGetTensorImpl() && p.weight_data == data_of(r.weight) &&
           p.bias_data == data_of(r.bias);
}

FetchedWeights PrefetchingWeightSource::fetch(const at::Tensor& weight, const at::Tensor& bias) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++fetches_;
    const FetchOrder::Key key = weight.unsafeGetTensorImpl();
    const Resident& resident = residents_.try_emplace(key, Resident{weight, bias}).first->second;
    FetchedWeights out;
    if (!queue_.empty() && serves(queue_.front(), resident)) {
        Prefetched& p = queue_.front();
        out.weight = p.weight->wait();
        if (p.bias) out.bias = p.bias->wait();
        queue_.pop_front();
        ++stats_.hits;
    } else {
        drop_from(0);  // the order went elsewhere: what was copied ahead is not what comes
        out = direct(resident);
        ++stats_.direct;
    }
    order_.observe(key);
    stats_.periods = order_.periods_learned();
    top_up();
    return out;
}

// Makes the queue hold the next depth_ predicted layers: keeps the part that still matches the
// prediction, drops the rest, starts copies for what is missing.
void PrefetchingWeightSource::top_up() {
    const std::vector<FetchOrder::Key> next = order_.upcoming(depth_);
    std::size_t keep = 0;
    while (keep < queue_.size() && keep < next.size() && queue_[keep].key == next[keep]) ++keep;
    drop_from(keep);
    if (fetches_ < paused_until_) return;
    for (std::size_t i = queue_.size(); i < next.size(); ++i) {
        const auto found = residents_.find(next[i]);
        if (found == residents_.end()) return;  // not fetched yet, so nothing to copy from
        const Resident& r = found->second;
        Prefetched p{next[i], data_of(r.weight), data_of(r.bias), nullptr, nullptr};
        try {
            p.weight = device_.copy_to_device_async(r.weight);
            if (r.bias.defined()) p.bias = device_.copy_to_device_async(r.bias);
        } catch (const c10::OutOfMemoryError&) {
            // No room for copies ahead: fetch directly for a period, then try again.
            if (stats_.no_room++ == 0) {
                low_vram_log().warn(
                    "stream prefetch: no device memory for the copies ahead; fetching layers on "
                    "demand for now (this costs speed, not correctness)");
            }
            drop_from(0);
            paused_until_ = fetches_ + std::max<std::size_t>(order_.period(), 1);
            return;
        }
        queue_.push_back(std::move(p));
    }
}

void PrefetchingWeightSource::drop_from(std::size_t index) {
    while (queue_.size() > index) {
        queue_.pop_back();
        ++stats_.wasted;
    }
}

void PrefetchingWeightSource::drop() {
    std::lock_guard<std::mutex> lock(mutex_);
    drop_from(0);
}

PrefetchingWeightSource::Stats PrefetchingWeightSource::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

std::size_t PrefetchingWeightSource::queued() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return queue_.size();
}

}  // namespace loom
