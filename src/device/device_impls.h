#pragma once

// The three Device implementations. Internal to the device layer; everyone else uses
// open_device() and the Device interface.

#include <c10/core/Stream.h>

#include <atomic>
#include <mutex>
#include <optional>

#include "loom/device/device.h"

namespace loom {

class CpuDevice final : public Device {
  public:
    CpuDevice();
    std::string description() const override;
    std::string hardware_name() const override;
    c10::Device torch_device() const override;
    MemoryStats stats() const override;
    void reset_peak() override {}
    void empty_cache() override {}
    void synchronize() override {}
    at::Tensor to_device(const at::Tensor& t) const override;
    at::Tensor to_host(const at::Tensor& t) const override;
};

class SimAllocator;

// The simulated accelerator. Its kernels are the CPU's, run at a parallelism of its own
// (kKernelThreads intra-op threads while it is open, the host's setting back when it closes):
// a GPU's kernels do not change with the host's OMP_NUM_THREADS, and on the CPU the thread count
// decides how reductions split (so the numbers) and the size of some kernels' scratch buffers on
// the calling thread (so the budget's count). With it, and the allocator counting the device
// thread's allocations only, the same command gives the same OOMs, rungs and LoRA at any
// OMP_NUM_THREADS. The plan's host.threads rung may still set another count for its run.
class SimDevice final : public Device {
  public:
    static constexpr int kKernelThreads = 2;
    explicit SimDevice(std::uint64_t budget);
    ~SimDevice() override;
    std::string description() const override;
    std::string hardware_name() const override;
    c10::Device torch_device() const override;
    MemoryStats stats() const override;
    void reset_peak() override;
    void empty_cache() override {}
    void synchronize() override {}
    at::Tensor to_device(const at::Tensor& t) const override;
    at::Tensor to_host(const at::Tensor& t) const override;

  private:
    SimAllocator& allocator_;
    int host_threads_;  // the intra-op threads before the device opened
    mutable std::atomic<std::uint64_t> copied_to_device_{0};  // to_device's host bytes
};

class CudaDevice final : public Device {
  public:
    CudaDevice(int index, std::optional<std::uint64_t> vram_limit);
    std::string description() const override;
    std::string hardware_name() const override;
    c10::Device torch_device() const override;
    MemoryStats stats() const override;
    void reset_peak() override;
    void empty_cache() override;
    void synchronize() override;
    at::Tensor to_device(const at::Tensor& t) const override;
    at::Tensor to_host(const at::Tensor& t) const override;
    std::unique_ptr<AsyncCopy> copy_to_device_async(const at::Tensor& host) const override;

  private:
    std::string name_;
    std::optional<std::uint64_t> limit_;
    // The side stream asynchronous copies run on: one per device, so the caching allocator keeps
    // one pool for their blocks instead of one per pool stream. Taken from c10's pool on first
    // use (a c10::Stream here keeps CUDA headers out of this header).
    mutable std::once_flag copy_stream_once_;
    mutable std::optional<c10::Stream> copy_stream_;
};

}  // namespace loom
