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
    name_ = modelled_ ? "sim allocation traffic" : "wall";
}

void StepClock::start() {
    if (modelled_) {
        start_bytes_ = device_.stats().allocated_total;
    } else {
        device_.synchronize();
        start_seconds_ = wall_seconds();
    }
}

double StepClock::seconds() {
    if (modelled_) {
        return static_cast<double>(device_.stats().allocated_total - start_bytes_) /
               kSimBytesPerSecond;
    }
    device_.synchronize();
    return wall_seconds() - start_seconds_;
}

}  // namespace loom
