#pragma once

// Host memory, as every device sees it. Code above the device layer that makes a host-resident
// tensor — a decoded image, a cache entry, weights read from a file before placement, a copy
// kept on the host — does so inside a HostAllocations scope, or copies with Device::to_host().
// On `sim` this is what keeps such tensors off the simulated budget (the CPU is both host and
// "device" there); on CUDA and cpu a CPU tensor is host memory anyway and the scope costs a
// thread-local increment. Only the device layer knows how the simulated allocator tells the two
// apart (device/sim_allocator.h).

namespace loom {

// While alive, allocations made by this thread are host-resident. Nests. Not movable: it scopes
// the thread that made it.
class HostAllocations {
  public:
    HostAllocations();
    ~HostAllocations();
    HostAllocations(const HostAllocations&) = delete;
    HostAllocations& operator=(const HostAllocations&) = delete;
    // True inside a scope on this thread.
    static bool active();
};

}  // namespace loom
