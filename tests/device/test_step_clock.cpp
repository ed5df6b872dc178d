// The measured choice's clock (device/step_clock.h): on sim a modelled time from the allocator's
// traffic — the same figure for the same work, whatever the host is doing — and the wall clock
// elsewhere or when asked for.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <string>

#include "loom/core/byte_size.h"
#include "loom/core/error.h"
#include "loom/device/device.h"
#include "loom/device/host_memory.h"
#include "loom/device/step_clock.h"

namespace loom {
namespace {

class StepClockTest : public ::testing::Test {
  protected:
    void TearDown() override { ::unsetenv("LOOM_STEP_CLOCK"); }
};

// Allocates `bytes` of device memory and frees it again.
void allocate(Device& device, std::int64_t bytes) {
    at::Tensor t = device.to_device(torch::zeros({bytes / 4}));
    (void)t;
}

TEST_F(StepClockTest, SimTimesTheBytesItsAllocatorHandsOut) {
    auto device = open_device({DeviceKind::kSim}, 64 * kMiB);
    StepClock clock(*device);
    EXPECT_TRUE(clock.modelled());
    EXPECT_EQ(clock.name(), "sim allocation traffic");
    clock.start();
    allocate(*device, 4 * kMiB);
    allocate(*device, 4 * kMiB);  // freed memory allocated again is traffic again
    EXPECT_DOUBLE_EQ(clock.seconds(), double(8 * kMiB) / kSimBytesPerSecond);
    // The same work is the same time, and host memory is no device traffic.
    clock.start();
    allocate(*device, 4 * kMiB);
    allocate(*device, 4 * kMiB);
    {
        HostAllocations host;
        at::Tensor on_host = torch::zeros({1 << 20});
        (void)on_host;
    }
    EXPECT_DOUBLE_EQ(clock.seconds(), double(8 * kMiB) / kSimBytesPerSecond);
}

TEST_F(StepClockTest, TheWallClockWhenAskedForAndOffSim) {
    ::setenv("LOOM_STEP_CLOCK", "wall", 1);
    auto sim = open_device({DeviceKind::kSim}, 64 * kMiB);
    StepClock wall(*sim);
    EXPECT_FALSE(wall.modelled());
    EXPECT_EQ(wall.name(), "wall");
    wall.start();
    EXPECT_GE(wall.seconds(), 0.0);
    ::unsetenv("LOOM_STEP_CLOCK");
    auto cpu = open_device({DeviceKind::kCpu});
    EXPECT_FALSE(StepClock(*cpu).modelled());
}

// The message of the error opening a clock on `device` under LOOM_STEP_CLOCK=`value` gives,
// or "" when it opens.
std::string clock_error(Device& device, const char* value) {
    ::setenv("LOOM_STEP_CLOCK", value, 1);
    try {
        StepClock clock(device);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST_F(StepClockTest, AnUnknownClockOrTrafficOffSimIsAnErrorNamingTheVariable) {
    auto cpu = open_device({DeviceKind::kCpu});
    const std::string off_sim = clock_error(*cpu, "traffic");
    EXPECT_NE(off_sim.find("LOOM_STEP_CLOCK=traffic: only the sim device"), std::string::npos)
        << off_sim;
    const std::string unknown = clock_error(*cpu, "cycles");
    EXPECT_NE(unknown.find("LOOM_STEP_CLOCK='cycles' is not a clock"), std::string::npos)
        << unknown;
}

}  // namespace
}  // namespace loom
