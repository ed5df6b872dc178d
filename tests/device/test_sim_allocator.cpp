// The simulated device: budgeted allocation through c10's allocator registry, exact accounting,
// host-resident memory, and faults fired from the allocator.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

#include "loom/core/byte_size.h"
#include "loom/core/error.h"
#include "loom/device/device.h"
#include "loom/device/faults.h"
#include "loom/device/sim_allocator.h"

namespace loom {
namespace {

using Event = SimAllocator::Event;

// A small MLP forward+backward whose activations dominate memory.
struct Mlp {
    torch::nn::Sequential net{torch::nn::Linear(256, 1024), torch::nn::GELU(),
                              torch::nn::Linear(1024, 1024), torch::nn::GELU(),
                              torch::nn::Linear(1024, 256)};
    void step(Device& device, int batch) {
        torch::manual_seed(0);
        at::Tensor x = device.to_device(torch::randn({batch, 256}));
        at::Tensor loss = net->forward(x).pow(2).mean();
        loss.backward();
    }
    void clear_grads() {
        for (auto& p : net->parameters()) p.mutable_grad() = at::Tensor();  // undefined, not zero
    }
};

class SimDeviceTest : public ::testing::Test {
  protected:
    void TearDown() override { fault_injector().clear(); }
};

TEST_F(SimDeviceTest, StatsAreExactToTheByte) {
    auto device = open_device({DeviceKind::kSim}, 96 * kMiB);
    EXPECT_EQ(device->stats().allocated, 0u);
    at::Tensor a = torch::empty({1000}, torch::kFloat32);  // 4000 bytes
    at::Tensor b = torch::empty({3}, torch::kFloat64);     // 24 bytes
    EXPECT_EQ(device->stats().allocated, 4024u);
    EXPECT_EQ(device->stats().free, 96 * kMiB - 4024u);
    EXPECT_EQ(device->stats().total, 96 * kMiB);
    a.reset();
    EXPECT_EQ(device->stats().allocated, 24u);
    EXPECT_EQ(device->stats().peak_allocated, 4024u);
    device->reset_peak();
    EXPECT_EQ(device->stats().peak_allocated, 24u);
}

TEST_F(SimDeviceTest, PeakEqualsLargestLiveTotalOfADeterministicSequence) {
    auto device = open_device({DeviceKind::kSim}, 96 * kMiB);
    std::uint64_t live = 0;
    std::uint64_t largest = 0;
    std::vector<at::Tensor> held;
    // Allocate and free in a fixed pattern, tracking the live total by hand.
    for (int i = 1; i <= 40; ++i) {
        const std::int64_t n = (i * 7919) % 5000 + 1;
        held.push_back(torch::empty({n}, torch::kUInt8));
        live += static_cast<std::uint64_t>(n);
        largest = std::max(largest, live);
        if (i % 3 == 0) {
            live -= static_cast<std::uint64_t>(held.front().numel());
            held.erase(held.begin());
        }
    }
    EXPECT_EQ(device->stats().allocated, live);
    EXPECT_EQ(device->stats().peak_allocated, largest);
}

TEST_F(SimDeviceTest, HostResidentMemoryDoesNotCount) {
    auto device = open_device({DeviceKind::kSim}, 1 * kMiB);
    at::Tensor on_device = torch::ones({1000});
    const std::uint64_t baseline = device->stats().allocated;
    at::Tensor host_copy = device->to_host(on_device);
    {
        HostScope host;
        at::Tensor cache = torch::empty({10 * 1024 * 1024}, torch::kUInt8);  // 10 MiB > budget
        EXPECT_FALSE(SimAllocator::is_device_resident(cache));
    }
    EXPECT_EQ(device->stats().allocated, baseline);
    EXPECT_FALSE(SimAllocator::is_device_resident(host_copy));
    EXPECT_TRUE(SimAllocator::is_device_resident(on_device));
    at::Tensor back = device->to_device(host_copy);
    EXPECT_TRUE(SimAllocator::is_device_resident(back));
    EXPECT_EQ(device->stats().allocated, baseline + 4000u);
    EXPECT_TRUE(torch::equal(back, on_device));
}

TEST_F(SimDeviceTest, ForwardBackwardOverBudgetThrowsAtTheCrossingAllocation) {
    Mlp mlp;
    std::uint64_t peak = 0;
    std::vector<Event> unconstrained;
    std::uint64_t baseline = 0;
    {
        auto device = open_device({DeviceKind::kSim}, 1024 * kMiB);
        SimAllocator& alloc = SimAllocator::install();
        mlp.net->to(torch::kCPU);
        baseline = device->stats().allocated;
        alloc.start_recording();
        mlp.step(*device, 64);
        unconstrained = alloc.stop_recording();
        peak = device->stats().peak_allocated;
        mlp.clear_grads();
    }
    ASSERT_GT(peak, baseline);
    // A budget one byte short of the peak: the step must fail at the first allocation that
    // pushes the live total above it, and at no other.
    const std::uint64_t budget = peak - 1;
    std::size_t crossing = 0;
    std::uint64_t crossing_bytes = 0;
    {
        std::size_t allocs = 0;
        for (const Event& e : unconstrained) {
            if (e.kind != Event::Kind::kAlloc) continue;
            ++allocs;
            if (e.allocated_after > budget) {
                crossing = allocs;
                crossing_bytes = e.bytes;
                break;
            }
        }
    }
    ASSERT_GT(crossing, 0u);

    auto device = open_device({DeviceKind::kSim}, budget);
    SimAllocator& alloc = SimAllocator::install();
    alloc.start_recording();
    std::string message;
    try {
        mlp.step(*device, 64);
        FAIL() << "expected an OOM";
    } catch (const c10::OutOfMemoryError& e) {
        message = e.what();
    }
    const std::vector<Event> constrained = alloc.stop_recording();
    std::size_t allocs = 0;
    const Event* oom = nullptr;
    for (const Event& e : constrained) {
        if (e.kind == Event::Kind::kAlloc) ++allocs;
        if (e.kind == Event::Kind::kOom) {
            oom = &e;
            break;
        }
    }
    ASSERT_NE(oom, nullptr);
    EXPECT_EQ(allocs + 1, crossing);  // the refused one is the crossing allocation
    EXPECT_EQ(oom->bytes, crossing_bytes);
    EXPECT_GT(oom->allocated_after + oom->bytes, budget);
    EXPECT_EQ(message.rfind("sim out of memory. Tried to allocate ", 0), 0u) << message;
    EXPECT_NE(message.find(" budget"), std::string::npos);
    // After the exception unwound, everything the attempt held is released.
    mlp.clear_grads();
    EXPECT_EQ(device->stats().allocated, baseline);
}

TEST_F(SimDeviceTest, OomMessageIsCudaShaped) {
    auto device = open_device({DeviceKind::kSim}, 96 * kMiB);
    at::Tensor held = torch::empty({89 * 1024 * 1024}, torch::kUInt8);  // leaves 7 MiB
    try {
        at::Tensor t = torch::empty({16 * 1024 * 1024}, torch::kUInt8);
        FAIL();
    } catch (const c10::OutOfMemoryError& e) {
        EXPECT_EQ(std::string(e.what()),
                  "sim out of memory. Tried to allocate 16.00 MiB; 7.00 MiB free of 96.00 MiB "
                  "budget");
    }
    EXPECT_EQ(device->stats().allocated, 89 * kMiB);
}

TEST_F(SimDeviceTest, AllocationFaultFiresOnTheNthDeviceAllocation) {
    auto device = open_device({DeviceKind::kSim}, 96 * kMiB);
    fault_injector().configure(parse_faults("oom:alloc=3"));
    std::vector<at::Tensor> ok;
    ok.push_back(torch::empty({10}));
    ok.push_back(torch::empty({10}));
    {
        HostScope host;
        ok.push_back(torch::empty({10}));  // host allocations are not device allocations
    }
    try {
        ok.push_back(torch::empty({10}));
        FAIL() << "the third device allocation must fail";
    } catch (const c10::OutOfMemoryError& e) {
        EXPECT_EQ(std::string(e.what()),
                  "sim out of memory (injected: oom:alloc=3). Tried to allocate 40 bytes; "
                  "96.00 MiB free of 96.00 MiB budget");
    }
    for (int i = 0; i < 20; ++i) ok.push_back(torch::empty({10}));  // never again
    EXPECT_EQ(device->stats().allocated, 22u * 40u);
}

TEST_F(SimDeviceTest, PhaseFaultFiresInsideItsPhaseOnly) {
    Mlp mlp;
    auto device = open_device({DeviceKind::kSim}, 512 * kMiB);
    fault_injector().configure(parse_faults("oom:phase=sample:times=2"));
    mlp.step(*device, 4);  // no phase: fine
    mlp.clear_grads();
    int failures = 0;
    for (int attempt = 0; attempt < 4; ++attempt) {
        PhaseScope phase(Phase::kSample);
        try {
            torch::NoGradGuard no_grad;
            mlp.net->forward(torch::randn({4, 256}));
        } catch (const c10::OutOfMemoryError&) {
            ++failures;
        }
    }
    EXPECT_EQ(failures, 2);
    PhaseScope train(Phase::kTrainStep, 1);
    mlp.step(*device, 4);
}

TEST_F(SimDeviceTest, DirtyDeviceReportsNothingFreeAndRefusesEverything) {
    fault_injector().configure(parse_faults("dirty"));
    auto device = open_device({DeviceKind::kSim}, 96 * kMiB);
    EXPECT_EQ(device->stats().free, 0u);
    EXPECT_EQ(device->stats().allocated, 0u);
    EXPECT_THROW(torch::empty({1}), c10::OutOfMemoryError);
}

// The device counts its own thread's allocations, in program order, as a GPU's allocator sees one
// stream's; other threads' (kernel workers' scratch, data workers) are host memory, so the count
// and the peak do not depend on how the host schedules them (issue 63).
TEST_F(SimDeviceTest, OnlyTheDeviceThreadsAllocationsCount) {
    auto device = open_device({DeviceKind::kSim}, 512 * kMiB);
    const std::uint64_t before = device->stats().allocated_total;
    std::vector<at::Tensor> others(4);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&others, t] {
            for (int i = 0; i < 2000; ++i) {
                at::Tensor x = torch::empty({(i % 97) + 1}, torch::kUInt8);
            }
            others[t] = torch::empty({1000}, torch::kUInt8);  // kept, still not the device's
        });
    }
    at::Tensor kept = torch::empty({123}, torch::kUInt8);
    for (auto& th : threads) th.join();
    EXPECT_EQ(device->stats().allocated, 123u);
    EXPECT_EQ(device->stats().allocated_total - before, 123u);
    EXPECT_EQ(device->stats().peak_allocated, 123u);
    for (const at::Tensor& t : others) EXPECT_FALSE(SimAllocator::is_device_resident(t));
    EXPECT_TRUE(SimAllocator::is_device_resident(kept));
    others.clear();
    EXPECT_EQ(device->stats().allocated, 123u);
}

// Its kernels run at its own parallelism while it is open, the host's setting back after.
TEST_F(SimDeviceTest, KernelsRunAtTheDevicesOwnParallelism) {
    const int host = at::get_num_threads();
    at::set_num_threads(1);
    {
        auto device = open_device({DeviceKind::kSim}, kMiB);
        EXPECT_EQ(at::get_num_threads(), 2);
    }
    EXPECT_EQ(at::get_num_threads(), 1);
    at::set_num_threads(3);
    {
        auto device = open_device({DeviceKind::kSim}, kMiB);
        EXPECT_EQ(at::get_num_threads(), 2);
    }
    EXPECT_EQ(at::get_num_threads(), 3);
    at::set_num_threads(host);
}

TEST_F(SimDeviceTest, OnlyOneSimDeviceAtATime) {
    auto first = open_device({DeviceKind::kSim}, kMiB);
    EXPECT_THROW(open_device({DeviceKind::kSim}, kMiB), Error);
}

TEST_F(SimDeviceTest, NeedsABudget) {
    try {
        open_device({DeviceKind::kSim});
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()),
                  "the sim device needs a memory budget: pass --vram SIZE (e.g. --vram 96MiB) or "
                  "set oom.vram_limit in the job");
    }
}

TEST(CpuDevice, ReportsHostMemoryAndPlacesOnCpu) {
    auto device = open_device({DeviceKind::kCpu});
    EXPECT_GT(device->stats().total, 0u);
    EXPECT_EQ(device->torch_device(), c10::Device(c10::DeviceType::CPU));
    EXPECT_TRUE(device->to_device(torch::ones({2})).device().is_cpu());
}

}  // namespace
}  // namespace loom
