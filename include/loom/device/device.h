#pragma once

// Where tensors live and how much memory is left there (DESIGN.md "Devices and the simulated
// GPU"):
//   cuda:N  a real GPU; memory from the CUDA caching allocator, optionally capped (--vram)
//   sim     a simulated accelerator on the CPU with a byte budget (SimAllocator)
//   cpu     plain CPU, no budget
// A Device is used from the training thread; stats() may be called from any thread.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "loom/device/device_spec.h"
#include "loom/device/memory_stats.h"

namespace loom {

// A host-to-device copy in flight (Device::copy_to_device_async). wait() returns the device
// tensor, ready for the work the calling thread queues from then on (on CUDA: its current
// stream); call it at most once, on the thread that uses the tensor. Dropping the handle without
// waiting is safe: the copy completes and its memory is freed after it.
class AsyncCopy {
  public:
    virtual ~AsyncCopy() = default;
    virtual at::Tensor wait() = 0;
};

class Device {
  public:
    virtual ~Device() = default;

    const DeviceSpec& spec() const { return spec_; }
    // "sim (budget 96.00 MiB)", "cuda:0 (NVIDIA H200)", "cpu".
    virtual std::string description() const = 0;
    // The hardware, without budgets or ordinals: "NVIDIA H200", "sim", "cpu" (the stable-config
    // store's key: two cards of one model are the same device).
    virtual std::string hardware_name() const = 0;
    // The c10 device tensors are placed on (kCPU for sim and cpu).
    virtual c10::Device torch_device() const = 0;

    virtual MemoryStats stats() const = 0;
    virtual void reset_peak() = 0;
    // Returns cached, unused memory to the device (CUDA); a no-op elsewhere.
    virtual void empty_cache() = 0;
    // Waits for queued device work to finish.
    virtual void synchronize() = 0;

    // A device-resident copy of `t` (or `t` itself when it already is one).
    virtual at::Tensor to_device(const at::Tensor& t) const = 0;
    // A host-resident copy of `t`, in pinned memory on CUDA; never counts against the budget.
    // Both copies keep `t`'s memory format (a channels-last weight stays channels-last).
    virtual at::Tensor to_host(const at::Tensor& t) const = 0;
    // Starts a device copy of the host-resident `host` and returns without waiting for it, so the
    // copy can overlap the computation already queued (block streaming's prefetch). On CUDA a
    // pinned tensor is copied on a side stream; elsewhere, and for unpinned memory, the copy is
    // made at once, so on sim its memory is counted from this call. Device memory is allocated
    // here: this throws c10::OutOfMemoryError as to_device() does.
    virtual std::unique_ptr<AsyncCopy> copy_to_device_async(const at::Tensor& host) const;

  protected:
    explicit Device(DeviceSpec spec) : spec_(spec) {}

  private:
    DeviceSpec spec_;
};

// Opens a device. `vram_limit` caps usable memory: the budget on sim (required there), the
// allocator's memory fraction on CUDA; ignored on cpu. Throws loom::Error when the device does
// not exist or the limit is unusable.
std::unique_ptr<Device> open_device(const DeviceSpec& spec,
                                    std::optional<std::uint64_t> vram_limit = std::nullopt);

// Number of CUDA devices visible to this process (0 without a GPU or driver).
int cuda_device_count();

}  // namespace loom
