#include <ATen/ATen.h>

#include <fstream>
#include <string>

#include "device_impls.h"

namespace loom {

namespace {

// MemTotal and MemAvailable from /proc/meminfo, in bytes (zeros when unavailable).
std::pair<std::uint64_t, std::uint64_t> host_memory() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    std::uint64_t value = 0;
    std::string unit;
    std::uint64_t total = 0;
    std::uint64_t available = 0;
    while (in >> key >> value >> unit) {
        if (key == "MemTotal:") total = value * 1024;
        if (key == "MemAvailable:") available = value * 1024;
    }
    return {total, available};
}

}  // namespace

CpuDevice::CpuDevice() : Device({DeviceKind::kCpu, 0}) {}

std::string CpuDevice::description() const {
    return "cpu (host memory, no budget)";
}

std::string CpuDevice::hardware_name() const {
    return "cpu";
}

c10::Device CpuDevice::torch_device() const {
    return c10::Device(c10::DeviceType::CPU);
}

MemoryStats CpuDevice::stats() const {
    const auto [total, available] = host_memory();
    MemoryStats s;
    s.total = total;
    s.free = available;
    return s;
}

at::Tensor CpuDevice::to_device(const at::Tensor& t) const {
    return t.to(at::kCPU);
}

at::Tensor CpuDevice::to_host(const at::Tensor& t) const {
    return t.to(at::kCPU);
}

}  // namespace loom
