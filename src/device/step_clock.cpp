#include "loom/device/step_clock.h"

#include <chrono>
#include <cstdlib>
#include <string_view>

#include "loom/core/error.h"
#include "loom/device/device.h"

namespace loom {

namespace {

double wall_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

}  // namespace

StepClock::StepClock(Device& device) : device_(device) {
    const bool sim = device.spec().kind == DeviceKind::kSim;
    const char* env = std::getenv("LOOM_STEP_CLOCK");
    const std::string_view choice = env == nullptr ? "auto" : env;
    if (choice == "auto" || choice.empty()) {
        modelled_ = sim;
    } else if (choice == "wall") {
        modelled_ = false;
    } else if (choice == "traffic") {
        if (!sim) {
            throw Error(
                "LOOM_STEP_CLOCK=traffic: only the sim device models its time (this run "
                "is on " +
                device.spec().to_string() + "); unset it or use wall");
        }
        modelled_ = true;
    } else {
        throw Error("LOOM_STEP_CLOCK='" + std::string(choice) +
                    "' is not a clock loom has: auto (the default), wall or traffic");
    }
    name_ = modelled_ ? "sim model" : "wall";
    if (const char* gbps = std::getenv("LOOM_SIM_HOST_TO_DEVICE_GBPS"); gbps != nullptr) {
        char* end = nullptr;
        const double value = std::strtod(gbps, &end);
        if (end == gbps || *end != '\0' || !(value > 0.0)) {
            throw Error("LOOM_SIM_HOST_TO_DEVICE_GBPS='" + std::string(gbps) +
                        "' is not a bandwidth: a positive number of GB/s (25 for PCIe 4.0 x16)");
        }
        host_to_device_ = value * 1e9 / kSimScale;
    }
}

void StepClock::start() {
    if (modelled_) {
        const MemoryStats s = device_.stats();
        start_bytes_ = s.allocated_total;
        start_allocations_ = s.allocations_total;
        start_copied_ = s.copied_to_device_total;
    } else {
        device_.synchronize();
        start_seconds_ = wall_seconds();
    }
}

double StepClock::seconds() {
    if (modelled_) {
        const MemoryStats s = device_.stats();
        return static_cast<double>(s.allocated_total - start_bytes_) / kSimBytesPerSecond +
               static_cast<double>(s.allocations_total - start_allocations_) * kSimLaunchSeconds +
               static_cast<double>(s.copied_to_device_total - start_copied_) / host_to_device_;
    }
    device_.synchronize();
    return wall_seconds() - start_seconds_;
}

}  // namespace loom
