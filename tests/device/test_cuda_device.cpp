// The real GPU (label `gpu`): skipped cleanly where no CUDA device is visible.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "loom/device/device.h"
#include "loom/device/oom_classify.h"

namespace loom {
namespace {

constexpr std::uint64_t kMiB = 1024 * 1024;

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

TEST_F(CudaDeviceTest, ToHostIsPinned) {
    auto device = open_device({DeviceKind::kCuda, 0});
    at::Tensor host = device->to_host(device->to_device(torch::ones({4})));
    EXPECT_TRUE(host.is_pinned());
    EXPECT_TRUE(host.device().is_cpu());
}

}  // namespace
}  // namespace loom
