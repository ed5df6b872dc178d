#include "loom/train/fetch_order.h"

#include <algorithm>
#include <unordered_set>

namespace loom {

FetchOrder::FetchOrder(std::size_t layer_count)
    // A period is at most every layer forward, recomputed and fetched again by its backward
    // (host_matmul.h's refetch); a square is two.
    : layer_count_(layer_count), capacity_(6 * layer_count + 8) {}

bool FetchOrder::observe(Key key) {
    ++observed_;
    bool hit = false;
    if (learned()) {
        if (period_[cursor_] == key) {
            hit = true;
            ++hits_;
            cursor_ = (cursor_ + 1) % period_.size();
        } else {
            ++misses_;
            last_miss_ = observed_;
            resync(key);
        }
    }
    history_.push_back(key);
    if (history_.size() > capacity_) history_.pop_front();
    if (anchor_ == nullptr) anchor_ = key;
    if (key == anchor_) {
        anchor_seen_.push_back(observed_);
        const std::uint64_t oldest = observed_ - history_.size() + 1;
        while (anchor_seen_.front() < oldest) anchor_seen_.pop_front();
        if (searching()) search_square();
    }
    return hit;
}

std::vector<FetchOrder::Key> FetchOrder::upcoming(std::size_t n) const {
    std::vector<Key> out;
    const std::size_t p = period_.size();
    for (std::size_t i = 0; i < std::min(n, p); ++i) out.push_back(period_[(cursor_ + i) % p]);
    return out;
}

// Until a period is learned, and for a while after each miss: long enough for a changed order to
// show two whole periods (and its anchor) after the last fetch it mispredicted.
bool FetchOrder::searching() const {
    if (layer_count_ == 0) return false;
    return !learned() || (last_miss_ != 0 && observed_ - last_miss_ <= 2 * capacity_);
}

// The fetch just recorded is the anchor: does the history end in a square whose period starts
// right after an earlier anchor fetch? Shortest period first.
void FetchOrder::search_square() {
    const std::size_t n = history_.size();
    for (auto earlier = anchor_seen_.rbegin() + 1; earlier != anchor_seen_.rend(); ++earlier) {
        const auto p = static_cast<std::size_t>(observed_ - *earlier);
        if (p < layer_count_) continue;
        if (2 * p > n) break;
        const auto end = history_.end();
        const auto half = end - static_cast<std::ptrdiff_t>(p);
        if (!std::equal(half, end, half - static_cast<std::ptrdiff_t>(p))) continue;
        const std::unordered_set<Key> layers(half, end);
        if (layers.size() < layer_count_) continue;  // a repeat that skips layers: not a pass
        adopt(p);
        return;
    }
}

void FetchOrder::adopt(std::size_t p) {
    period_.assign(history_.end() - static_cast<std::ptrdiff_t>(p), history_.end());
    positions_.clear();
    for (std::size_t i = 0; i < period_.size(); ++i) positions_[period_[i]].push_back(i);
    cursor_ = 0;  // the history ends with a whole period: next comes its first fetch
    last_miss_ = 0;
    ++periods_learned_;
}

// A miss: the cursor moves to where `key` next appears in the period (the prediction goes on
// from there); a key the period does not hold leaves it where it is.
void FetchOrder::resync(Key key) {
    const auto found = positions_.find(key);
    if (found == positions_.end()) return;
    const std::vector<std::size_t>& at = found->second;
    const auto next = std::lower_bound(at.begin(), at.end(), cursor_);
    cursor_ = ((next != at.end() ? *next : at.front()) + 1) % period_.size();
}

}  // namespace loom
