#pragma once

// The simulated accelerator's memory: a byte-budgeted c10 CPU allocator. Installed through c10's
// allocator registry, it serves every CPU allocation in the process. What is counted is what a
// GPU's caching allocator sees of one stream: the allocations of the device's thread (the one
// that set the budget), in program order, unless that thread is inside a HostScope —
// host-resident memory (to_host copies, offloaded weights, caches, data-loader buffers) does not
// count. Allocations of every other thread (the CPU kernels' worker threads' scratch, data
// workers) are host memory too: their number, size and order depend on how many threads the
// host runs and how they are scheduled, and counting them made the same command give other OOMs
// at another OMP_NUM_THREADS (issue 63). A device allocation that would exceed the budget, or
// that fault injection selects, throws c10::OutOfMemoryError with a CUDA-shaped message:
//   "sim out of memory. Tried to allocate 16.00 MiB; 7.00 MiB free of 96.00 MiB budget"
// Current and peak counts are exact to the byte (requested sizes). Thread-safe.

#include <c10/core/Allocator.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "loom/device/host_memory.h"
#include "loom/device/memory_stats.h"

namespace at {
class Tensor;
}

namespace loom {

class SimAllocator final : public c10::Allocator {
  public:
    // The process-wide instance, registered with c10 on first call (static lifetime, as c10
    // requires). Until set_budget() is called it counts nothing.
    static SimAllocator& install();

    // Starts accounting with `budget` bytes on the calling thread, which becomes the device's;
    // the peak restarts from the current count.
    void set_budget(std::uint64_t budget);
    // Stops accounting (allocations become host-resident, nothing is refused).
    void disable();
    bool enabled() const { return enabled_.load(); }

    std::uint64_t budget() const { return budget_.load(); }
    std::uint64_t allocated() const { return current_.load(); }
    std::uint64_t peak() const { return peak_.load(); }
    void reset_peak() { peak_.store(current_.load()); }
    std::uint64_t device_allocations() const { return device_allocations_.load(); }
    // Bytes of every device-resident allocation since install(), freed or not.
    std::uint64_t allocated_total() const { return allocated_total_.load(); }

    // Allocation history of device-resident memory, like CUDA's memory history: every
    // allocation, free and refused allocation while recording is on.
    struct Event {
        enum class Kind { kAlloc, kFree, kOom };
        Kind kind;
        std::uint64_t bytes;
        std::uint64_t allocated_after;  // device bytes live after the event
    };
    void start_recording();
    std::vector<Event> stop_recording();

    // True when `tensor`'s storage was allocated here as device-resident memory.
    static bool is_device_resident(const at::Tensor& tensor);

    c10::DataPtr allocate(size_t n) override;
    c10::DeleterFnPtr raw_deleter() const override { return &SimAllocator::deleter; }
    void copy_data(void* dest, const void* src, std::size_t count) const override;

  private:
    SimAllocator() = default;
    static void deleter(void* data);
    void record(Event::Kind kind, std::uint64_t bytes, std::uint64_t allocated_after);
    [[noreturn]] void refuse(std::uint64_t bytes, std::uint64_t free, const std::string& why);

    std::atomic<bool> enabled_{false};
    std::atomic<std::thread::id> device_thread_{};
    std::atomic<std::uint64_t> budget_{0};
    std::atomic<std::uint64_t> current_{0};
    std::atomic<std::uint64_t> peak_{0};
    std::atomic<std::uint64_t> device_allocations_{0};
    std::atomic<std::uint64_t> allocated_total_{0};
    std::atomic<bool> recording_{false};
    std::mutex history_mutex_;
    std::vector<Event> history_;
};

// The allocator's switch: allocations inside a HostAllocations scope (device/host_memory.h) are
// host-resident (not counted). Layers above the device layer use HostAllocations by that name.
using HostScope = HostAllocations;

}  // namespace loom
