// The real GPU. Compiles and links against the CUDA-enabled LibTorch everywhere; runs only where
// a GPU is visible (tests labelled `gpu`).

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include "device_impls.h"
#include "loom/core/byte_size.h"
#include "loom/core/error.h"

namespace loom {

namespace {

constexpr int kAggregate = 0;  // StatType::AGGREGATE

std::pair<std::uint64_t, std::uint64_t> mem_get_info(int index) {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index));
    std::size_t free = 0;
    std::size_t total = 0;
    const cudaError_t err = cudaMemGetInfo(&free, &total);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        throw Error("cuda:" + std::to_string(index) +
                    ": cannot query memory: " + cudaGetErrorString(err));
    }
    return {free, total};
}

// A device copy made on the copy stream. wait() orders the caller's stream after it and tells
// the caching allocator that stream uses the memory: without record_stream the block could be
// handed out again (on the copy stream) as soon as the tensor is freed, while kernels queued on
// the compute stream still read it.
class CudaAsyncCopy final : public AsyncCopy {
  public:
    CudaAsyncCopy(at::Tensor host, at::Tensor device, c10::cuda::CUDAEvent ready)
        : host_(std::move(host)), device_(std::move(device)), ready_(std::move(ready)) {}

    at::Tensor wait() override {
        const c10::cuda::CUDAStream current =
            c10::cuda::getCurrentCUDAStream(device_.device().index());
        ready_.block(current);
        device_.record_stream(current);
        host_.reset();
        return std::move(device_);
    }

  private:
    at::Tensor host_;  // the pinned source, alive until the copy has been waited for
    at::Tensor device_;
    c10::cuda::CUDAEvent ready_;
};

}  // namespace

int cuda_device_count() {
    try {
        return static_cast<int>(c10::cuda::device_count());
    } catch (const std::exception&) {
        return 0;  // no driver
    }
}

CudaDevice::CudaDevice(int index, std::optional<std::uint64_t> vram_limit)
    : Device({DeviceKind::kCuda, index}), limit_(vram_limit) {
    const int count = cuda_device_count();
    if (index >= count) {
        throw Error("cuda:" + std::to_string(index) + " does not exist: " +
                    (count == 0 ? std::string("no CUDA device is visible")
                                : std::to_string(count) + " CUDA device(s) are visible") +
                    " (use --device sim to simulate one, or cpu)");
    }
    const cudaDeviceProp* props =
        at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(index));
    name_ = props->name;
    if (limit_) {
        const std::uint64_t total = props->totalGlobalMem;
        if (*limit_ > total) {
            throw Error("--vram " + format_byte_size(*limit_) + " is more than cuda:" +
                        std::to_string(index) + " has (" + format_bytes_human(total) + ")");
        }
        c10::cuda::CUDACachingAllocator::setMemoryFraction(
            static_cast<double>(*limit_) / static_cast<double>(total),
            static_cast<c10::DeviceIndex>(index));
    }
}

std::string CudaDevice::description() const {
    std::string d = spec().to_string() + " (" + name_ + ")";
    if (limit_) d += ", capped at " + format_bytes_human(*limit_);
    return d;
}

std::string CudaDevice::hardware_name() const {
    return name_;
}

c10::Device CudaDevice::torch_device() const {
    return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(spec().index));
}

MemoryStats CudaDevice::stats() const {
    const auto idx = static_cast<c10::DeviceIndex>(spec().index);
    const auto dev = c10::cuda::CUDACachingAllocator::getDeviceStats(idx);
    MemoryStats s;
    s.allocated = static_cast<std::uint64_t>(dev.allocated_bytes[kAggregate].current);
    s.reserved = static_cast<std::uint64_t>(dev.reserved_bytes[kAggregate].current);
    s.peak_allocated = static_cast<std::uint64_t>(dev.allocated_bytes[kAggregate].peak);
    s.peak_reserved = static_cast<std::uint64_t>(dev.reserved_bytes[kAggregate].peak);
    s.allocated_total = static_cast<std::uint64_t>(dev.allocated_bytes[kAggregate].allocated);
    const auto [free, total] = mem_get_info(spec().index);
    s.total = limit_ ? *limit_ : total;
    // Under a cap, what this process may still take: the cap minus what it reserved.
    s.free = limit_
                 ? (s.total > s.reserved ? std::min<std::uint64_t>(free, s.total - s.reserved) : 0)
                 : free;
    return s;
}

void CudaDevice::reset_peak() {
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(spec().index));
}

void CudaDevice::empty_cache() {
    c10::cuda::CUDACachingAllocator::emptyCache();
}

void CudaDevice::synchronize() {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(spec().index));
    c10::cuda::device_synchronize();
}

at::Tensor CudaDevice::to_device(const at::Tensor& t) const {
    return t.to(torch_device(), /*non_blocking=*/t.is_pinned());
}

at::Tensor CudaDevice::to_host(const at::Tensor& t) const {
    // The source's memory format, so a channels-last weight streamed from the host (low_vram
    // level 3) comes back channels-last.
    at::Tensor host = at::empty(
        t.sizes(),
        t.options().device(at::kCPU).pinned_memory(true).memory_format(t.suggest_memory_format()));
    host.copy_(t);
    return host;
}

std::unique_ptr<AsyncCopy> CudaDevice::copy_to_device_async(const at::Tensor& host) const {
    // From pageable memory a "non-blocking" copy is staged synchronously anyway.
    if (!host.defined() || !host.is_cpu() || !host.is_pinned()) {
        return Device::copy_to_device_async(host);
    }
    const auto index = static_cast<c10::DeviceIndex>(spec().index);
    std::call_once(copy_stream_once_, [&] {
        copy_stream_ = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index).unwrap();
    });
    const c10::cuda::CUDAStream stream(c10::cuda::CUDAStream::UNCHECKED, *copy_stream_);
    c10::cuda::CUDAStreamGuard on_copy_stream(stream);  // also makes the device current
    // Allocated on the copy stream, which alone uses it until wait() hands it to another.
    at::Tensor device = host.to(torch_device(), /*non_blocking=*/true);
    c10::cuda::CUDAEvent ready;
    ready.record(stream);
    return std::make_unique<CudaAsyncCopy>(host, std::move(device), std::move(ready));
}

}  // namespace loom
