// The real GPU (label `gpu`): skipped cleanly where no CUDA device is visible.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "loom/core/byte_size.h"
#include "loom/device/device.h"
#include "loom/device/oom_classify.h"

namespace loom {
namespace {

class CudaDeviceTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
    }
};

TEST_F(CudaDeviceTest, StatsFollowTheCachingAllocator) {
    auto device = open_device({DeviceKind::kCuda, 0});
    const std::uint64_t before = device->stats().allocated;
    at::Tensor t =
        torch::empty({64 * 1024 * 1024}, torch::dtype(torch::kUInt8).device(torch::kCUDA));
    EXPECT_EQ(device->stats().allocated, before + 64 * kMiB);
    EXPECT_GE(device->stats().reserved, device->stats().allocated);
    t.reset();
    device->empty_cache();
    EXPECT_EQ(device->stats().allocated, before);
}

TEST_F(CudaDeviceTest, VramLimitMakesRealOoms) {
    auto device = open_device({DeviceKind::kCuda, 0}, 256 * kMiB);
    try {
        at::Tensor t =
            torch::empty({512 * 1024 * 1024}, torch::dtype(torch::kUInt8).device(torch::kCUDA));
        FAIL() << "expected an OOM under a 256 MiB cap";
    } catch (...) {
        EXPECT_EQ(classify(std::current_exception()), OomKind::kDevice);
    }
}

// Block streaming's host copies keep the layout perf.channels_last gave the weights, and an
// asynchronous copy (a side stream, then an event the compute stream waits on) gives the same
// values as a plain one, usable at once on the current stream.
TEST_F(CudaDeviceTest, CopiesKeepTheLayoutAndAsyncCopiesArriveWhole) {
    auto device = open_device({DeviceKind::kCuda, 0});
    const at::Tensor weight =
        device->to_device(torch::randn({64, 32, 3, 3}).contiguous(at::MemoryFormat::ChannelsLast));
    const at::Tensor host = device->to_host(weight);
    EXPECT_TRUE(host.is_pinned());
    EXPECT_TRUE(host.is_contiguous(at::MemoryFormat::ChannelsLast));
    std::vector<std::unique_ptr<AsyncCopy>> copies;
    for (int i = 0; i < 8; ++i) copies.push_back(device->copy_to_device_async(host));
    copies.pop_back();  // dropped without waiting: safe
    for (auto& c : copies) {
        const at::Tensor t = c->wait();
        EXPECT_TRUE(t.is_cuda());
        EXPECT_TRUE(t.is_contiguous(at::MemoryFormat::ChannelsLast));
        EXPECT_TRUE(torch::equal(t * 2, weight * 2));  // used on the current stream right away
    }
}

TEST_F(CudaDeviceTest, ToHostIsPinned) {
    auto device = open_device({DeviceKind::kCuda, 0});
    at::Tensor host = device->to_host(device->to_device(torch::ones({4})));
    EXPECT_TRUE(host.is_pinned());
    EXPECT_TRUE(host.device().is_cpu());
}

}  // namespace
}  // namespace loom
