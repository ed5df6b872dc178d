#pragma once

// Block streaming with prefetch (perf.stream_prefetch, low_vram level 3): the weight source of the
// streamed UNet layers copies the next layers' weights to the device while the current one
// computes, so on CUDA the copies overlap compute instead of stalling it.
//
// It learns the order layers are fetched in (train/fetch_order.h). When a layer is fetched, its
// copy has usually been started already: it is taken from the queue, and copies of the layers
// predicted next are started until kDepth of them are in flight. A fetch the queue does not hold
// first — the order changed, or it is still being learned — drops the queue and copies that
// layer directly, as the plain source does. Copies are matched by the layer's resident weight
// (its TensorImpl and storage), never by position, so a wrong prediction costs a copy, not a
// wrong weight.
//
// Memory: at most kDepth layers' device copies more than without prefetch, alive from their
// prefetch to their use (also between steps: the next pass's first layers). A prefetch the
// device has no room for is given up — the queue is dropped and the source fetches directly for
// one period — rather than failing the step: prefetch is an optimisation the guard does not
// know about. drop() releases the queue; the trainer calls it after an OOM (guard's release).
//
// Thread-safe: fetches may come from autograd's worker threads (recomputes in backward).

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "loom/device/device.h"
#include "loom/model/nn/adaptable_layers.h"
#include "loom/train/fetch_order.h"

namespace loom {

class PrefetchingWeightSource final : public WeightSource {
  public:
    // Layers copied ahead of the one computing: enough to hide a layer's copy behind the next
    // layer's compute, few enough that the extra memory is a couple of layers.
    static constexpr std::size_t kDepth = 2;

    struct Stats {
        std::uint64_t hits = 0;     // fetches served from a prefetched copy
        std::uint64_t direct = 0;   // fetches copied on demand
        std::uint64_t wasted = 0;   // prefetched copies dropped unused
        std::uint64_t no_room = 0;  // prefetches given up for lack of device memory
        std::uint64_t periods = 0;  // orders learned
    };

    // `layer_count`: the streamed layers (every pass fetches each). `device` must outlive this.
    PrefetchingWeightSource(const Device& device, std::size_t layer_count,
                            std::size_t depth = kDepth);

    FetchedWeights fetch(const at::Tensor& weight, const at::Tensor& bias) override;

    // Releases every prefetched copy; the learned order stays.
    void drop();
    Stats stats() const;
    // Prefetched copies in flight or ready.
    std::size_t queued() const;

  private:
    struct Resident {
        at::Tensor weight;
        at::Tensor bias;
    };
    struct Prefetched {
        FetchOrder::Key key;
        const void* weight_data;  // the resident storage copied: a set_data since makes it stale
        const void* bias_data;
        std::unique_ptr<AsyncCopy> weight;
        std::unique_ptr<AsyncCopy> bias;
    };

    FetchedWeights direct(const Resident& r) const;
    bool serves(const Prefetched& p, const Resident& r) const;
    void top_up();
    void drop_from(std::size_t index);

    const Device& device_;
    const std::size_t depth_;
    mutable std::mutex mutex_;
    FetchOrder order_;
    std::unordered_map<FetchOrder::Key, Resident> residents_;  // every layer fetched so far
    std::deque<Prefetched> queue_;  // in predicted order: queue_[i] is upcoming(depth_)[i]
    std::uint64_t fetches_ = 0;
    std::uint64_t paused_until_ = 0;  // no prefetch before this fetch number (after no room)
    Stats stats_;
};

}  // namespace loom
