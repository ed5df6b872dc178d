#pragma once

// The order block streaming fetches its layers in, learned by watching the fetches, so the next
// ones can be copied ahead (perf.stream_prefetch, train/prefetching_weight_source.h).
//
// A UNet call fetches every streamed layer in forward order; its backward fetches each again in
// reverse to compute the input's gradient (the device copy is not kept from forward to backward,
// model/nn/host_matmul.h), and under gradient checkpointing the recomputes fetch them once more,
// segment by segment in reverse, each segment's layers in forward order. So the sequence repeats
// from pass to pass, but one layer appears up to three times in a period and what follows it
// differs: the next layer is not a function of the current one. The order is kept as a whole
// period with a cursor into it.
//
// Learning: the recent fetches are searched for a square — the last 2p fetches being one period
// of p, twice, with every streamed layer in it. The search runs at each fetch of one anchor
// layer (the first one seen), against its earlier fetches, so it costs O(p) once per period.
// A fetch that differs from the prediction (a preview after training, a retried step, the ladder
// switching gradient checkpointing) moves the cursor to where that layer next appears, and while
// predictions keep missing the search goes on; the first square found replaces the period. A
// stable workload stops searching once its period is learned.
//
// Pure logic: layers are opaque keys. Not thread-safe (the weight source serialises calls).

#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

namespace loom {

class FetchOrder {
  public:
    using Key = const void*;

    // `layer_count`: how many distinct layers every pass fetches (a period must hold them all).
    explicit FetchOrder(std::size_t layer_count);

    // Records that `key` is fetched now. True when it was the predicted next fetch.
    bool observe(Key key);
    // The fetches predicted to follow the last observed one, next first: at most `n`, none
    // before a period is learned.
    std::vector<Key> upcoming(std::size_t n) const;

    bool learned() const { return !period_.empty(); }
    std::size_t period() const { return period_.size(); }
    std::uint64_t hits() const { return hits_; }
    std::uint64_t misses() const { return misses_; }
    std::uint64_t periods_learned() const { return periods_learned_; }

  private:
    bool searching() const;
    void search_square();
    void adopt(std::size_t p);
    void resync(Key key);

    std::size_t layer_count_;
    std::size_t capacity_;     // fetches kept: two of the longest period
    std::deque<Key> history_;  // the most recent fetches, oldest first
    std::uint64_t observed_ = 0;
    Key anchor_ = nullptr;
    std::deque<std::uint64_t> anchor_seen_;  // fetch numbers of the anchor still in history_
    std::vector<Key> period_;
    std::unordered_map<Key, std::vector<std::size_t>> positions_;  // in period_, ascending
    std::size_t cursor_ = 0;                                       // period_ index predicted next
    std::uint64_t last_miss_ = 0;                                  // fetch number; 0: none
    std::uint64_t hits_ = 0;
    std::uint64_t misses_ = 0;
    std::uint64_t periods_learned_ = 0;
};

}  // namespace loom
