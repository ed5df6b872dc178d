#include <ATen/ATen.h>

#include <atomic>

#include "device_impls.h"
#include "loom/core/byte_size.h"
#include "loom/core/error.h"
#include "loom/device/faults.h"
#include "loom/device/sim_allocator.h"

namespace loom {

namespace {
// The budget lives in the process-wide allocator, so two sim devices would share it.
std::atomic<int> open_sim_devices{0};
}  // namespace

SimDevice::SimDevice(std::uint64_t budget)
    : Device({DeviceKind::kSim, 0}),
      allocator_(SimAllocator::install()),
      host_threads_(at::get_num_threads()) {
    if (open_sim_devices.fetch_add(1) != 0) {
        --open_sim_devices;
        throw Error("a sim device is already open in this process; close it first");
    }
    at::set_num_threads(kKernelThreads);
    allocator_.set_budget(budget);
}

SimDevice::~SimDevice() {
    allocator_.disable();
    at::set_num_threads(host_threads_);
    --open_sim_devices;
}

std::string SimDevice::description() const {
    return "sim (simulated accelerator, budget " + format_bytes_human(allocator_.budget()) + ")";
}

std::string SimDevice::hardware_name() const {
    return "sim";
}

c10::Device SimDevice::torch_device() const {
    return c10::Device(c10::DeviceType::CPU);
}

MemoryStats SimDevice::stats() const {
    MemoryStats s;
    s.allocated = allocator_.allocated();
    s.reserved = s.allocated;  // no caching: what is allocated is what is held
    s.peak_allocated = allocator_.peak();
    s.peak_reserved = s.peak_allocated;
    s.total = allocator_.budget();
    s.allocated_total = allocator_.allocated_total();
    s.allocations_total = allocator_.device_allocations();
    s.copied_to_device_total = copied_to_device_.load();
    // `dirty`: memory held outside loom, as on a GPU another process still occupies.
    s.free = fault_injector().dirty() ? 0 : s.total - std::min(s.total, s.allocated);
    return s;
}

void SimDevice::reset_peak() {
    allocator_.reset_peak();
}

at::Tensor SimDevice::to_device(const at::Tensor& t) const {
    if (!t.defined() || SimAllocator::is_device_resident(t)) return t;
    copied_to_device_ += static_cast<std::uint64_t>(t.numel()) * t.element_size();
    return t.to(at::kCPU).clone();  // allocated outside any HostScope: counted
}

at::Tensor SimDevice::to_host(const at::Tensor& t) const {
    HostScope host;
    return t.to(at::kCPU).clone();
}

}  // namespace loom
