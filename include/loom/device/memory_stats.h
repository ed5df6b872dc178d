#pragma once

// A device's memory figures, in bytes.

#include <cstdint>
#include <string>

namespace loom {

struct MemoryStats {
    std::uint64_t allocated = 0;       // bytes held by live tensors
    std::uint64_t reserved = 0;        // bytes held by the allocator (>= allocated on CUDA)
    std::uint64_t peak_allocated = 0;  // highest `allocated` since the last reset_peak()
    // highest `reserved` since the last reset_peak(): what the card had to give this process (the
    // caching allocator keeps freed blocks, so this, not peak_allocated, is what a cap must hold)
    std::uint64_t peak_reserved = 0;
    std::uint64_t total = 0;  // device capacity (the budget on sim, RAM on cpu)
    std::uint64_t free = 0;   // what the device reports free
    // bytes handed out since the device opened, freed or not (cumulative; 0 on cpu): how much
    // memory traffic a piece of work caused (device/step_clock.h)
    std::uint64_t allocated_total = 0;
    // device allocations handed out since the device opened (sim only; 0 elsewhere): a kernel's
    // output each, so the kernel launches a piece of work made (device/step_clock.h)
    std::uint64_t allocations_total = 0;
    // bytes copied from host memory to the device since it opened (sim only; 0 elsewhere)
    std::uint64_t copied_to_device_total = 0;

    // "allocated 12.00 MiB, reserved 16.00 MiB, peak 40.00 MiB, free 80.00 MiB of 96.00 MiB"
    std::string to_string() const;
};

}  // namespace loom
