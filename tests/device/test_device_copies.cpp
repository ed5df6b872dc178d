// Copies between host and device: they keep a tensor's memory format (perf.channels_last's conv
// weights go through them at every placement, bf16 conversion and block-streaming fetch), and an
// asynchronous copy gives what a plain one gives — on sim made at once and counted from the call.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "loom/device/device.h"
#include "loom/device/host_memory.h"
#include "loom/device/sim_allocator.h"

namespace loom {
namespace {

at::Tensor channels_last_weight() {
    HostAllocations host;
    return torch::randn({8, 4, 3, 3}).contiguous(at::MemoryFormat::ChannelsLast);
}

TEST(DeviceCopies, KeepTheMemoryFormat) {
    for (const DeviceKind kind : {DeviceKind::kCpu, DeviceKind::kSim}) {
        auto device = open_device({kind}, std::uint64_t{1} << 20);
        const at::Tensor host = channels_last_weight();
        const at::Tensor on_device = device->to_device(host.to(at::kBFloat16));
        EXPECT_TRUE(on_device.is_contiguous(at::MemoryFormat::ChannelsLast));
        EXPECT_TRUE(device->to_host(on_device).is_contiguous(at::MemoryFormat::ChannelsLast));
        const at::Tensor async = device->copy_to_device_async(host)->wait();
        EXPECT_TRUE(async.is_contiguous(at::MemoryFormat::ChannelsLast));
        EXPECT_TRUE(torch::equal(async, host));
    }
}

TEST(DeviceCopies, SimCountsAnAsyncCopyFromItsStart) {
    auto device = open_device({DeviceKind::kSim}, std::uint64_t{1} << 20);
    const at::Tensor host = channels_last_weight();
    EXPECT_EQ(device->stats().allocated, 0u);  // host memory is not counted
    std::unique_ptr<AsyncCopy> copy = device->copy_to_device_async(host);
    EXPECT_EQ(device->stats().allocated, host.nbytes());
    const at::Tensor t = copy->wait();
    EXPECT_TRUE(SimAllocator::is_device_resident(t));
    EXPECT_TRUE(torch::equal(t, host));
    // A copy dropped without waiting lets go of its memory.
    copy = device->copy_to_device_async(host);
    EXPECT_EQ(device->stats().allocated, 2 * host.nbytes());
    copy.reset();
    EXPECT_EQ(device->stats().allocated, host.nbytes());
}

}  // namespace
}  // namespace loom
