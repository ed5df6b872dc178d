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

// The modelled seconds of work that allocated `bytes` in `allocations` and copied `copied` from
// the host, at the default host link.
double modelled(double bytes, double allocations, double copied) {
    return bytes / kSimBytesPerSecond + allocations * kSimLaunchSeconds +
           copied / (kModelledHostToDeviceGbps * 1e9 / kSimScale);
}

TEST_F(StepClockTest, SimTimesTrafficLaunchesAndCopies) {
    auto device = open_device({DeviceKind::kSim}, 64 * kMiB);
    StepClock clock(*device);
    EXPECT_TRUE(clock.modelled());
    EXPECT_EQ(clock.name(), "sim model");
    clock.start();
    allocate(*device, 4 * kMiB);
    allocate(*device, 4 * kMiB);  // freed memory allocated again is traffic again
    // Made on the device: two kernels' outputs, nothing over the host link.
    EXPECT_DOUBLE_EQ(clock.seconds(), modelled(8 * kMiB, 2, 0));
    // The same work is the same time, and host memory is no device traffic.
    clock.start();
    allocate(*device, 4 * kMiB);
    allocate(*device, 4 * kMiB);
    {
        HostAllocations host;
        at::Tensor on_host = torch::zeros({1 << 20});
        (void)on_host;
    }
    EXPECT_DOUBLE_EQ(clock.seconds(), modelled(8 * kMiB, 2, 0));
    EXPECT_DOUBLE_EQ(clock.micro_batch_seconds(), kSimMicroBatchSeconds);
}

// The same bytes in four kernels cost more than in one (four micro-batches of 1 launch what one
// of 4 does four times), and computing on the device copies nothing from the host.
TEST_F(StepClockTest, SimChargesEachLaunchAndOnlyHostCopiesCrossTheLink) {
    auto device = open_device({DeviceKind::kSim}, 64 * kMiB);
    const at::Tensor resident = device->to_device(torch::ones({1 << 20}));
    StepClock clock(*device);
    clock.start();
    { at::Tensor one = resident.neg(); }
    const double one_kernel = clock.seconds();
    EXPECT_DOUBLE_EQ(one_kernel, modelled(4 * kMiB, 1, 0));
    clock.start();
    for (int i = 0; i < 4; ++i) {
        at::Tensor quarter = resident.slice(0, i << 18, (i + 1) << 18).neg();
    }
    EXPECT_DOUBLE_EQ(clock.seconds(), modelled(4 * kMiB, 4, 0));
    EXPECT_GT(clock.seconds(), one_kernel);
}

// A copy from host memory (block streaming's fetch, a batch) costs its bytes over the host link,
// whose bandwidth is a parameter.
TEST_F(StepClockTest, HostCopiesCrossTheHostLinkAParameter) {
    auto device = open_device({DeviceKind::kSim}, 64 * kMiB);
    at::Tensor on_host;
    {
        HostAllocations host;
        on_host = torch::ones({1 << 20});
    }
    StepClock clock(*device);
    clock.start();
    { at::Tensor copy = device->to_device(on_host); }
    EXPECT_DOUBLE_EQ(clock.seconds(), modelled(4 * kMiB, 1, 4 * kMiB));
    ::setenv("LOOM_SIM_HOST_TO_DEVICE_GBPS", "50", 1);
    StepClock fast(*device);
    EXPECT_DOUBLE_EQ(fast.host_to_device_bytes_per_second(), 50e9 / kSimScale);
    fast.start();
    { at::Tensor copy = device->to_device(on_host); }
    EXPECT_DOUBLE_EQ(fast.seconds(), double(4 * kMiB) / kSimBytesPerSecond + kSimLaunchSeconds +
                                         double(4 * kMiB) / (50e9 / kSimScale));
    ::setenv("LOOM_SIM_HOST_TO_DEVICE_GBPS", "fast", 1);
    try {
        StepClock bad(*device);
        FAIL() << "a bandwidth that is not a number opened";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("LOOM_SIM_HOST_TO_DEVICE_GBPS='fast'"),
                  std::string::npos)
            << e.what();
    }
    ::unsetenv("LOOM_SIM_HOST_TO_DEVICE_GBPS");
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
