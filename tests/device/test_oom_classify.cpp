// OOM classification over real exception types and the messages PyTorch prints.

#include <c10/cuda/CUDAException.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "loom/device/oom_classify.h"

namespace loom {
namespace {

struct Case {
    const char* name;
    std::exception_ptr error;
    OomKind expected;
};

template <class E>
std::exception_ptr make(const std::string& message) {
    return std::make_exception_ptr(E(message));
}

std::vector<Case> cases() {
    return {
        // Device OOM: the type decides, whatever the wording of the PyTorch version.
        {"pytorch_1_13",
         make<c10::OutOfMemoryError>(
             "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total capacity; "
             "6.12 GiB already allocated; 3.31 MiB free; 6.45 GiB reserved in total by PyTorch) "
             "If reserved memory is >> allocated memory try setting max_split_size_mb to avoid "
             "fragmentation.  See documentation for Memory Management and "
             "PYTORCH_CUDA_ALLOC_CONF"),
         OomKind::kDevice},
        {"pytorch_2_1",
         make<c10::OutOfMemoryError>(
             "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacty of 23.65 "
             "GiB of which 1.06 GiB is free. Process 4242 has 22.58 GiB memory in use. Of the "
             "allocated memory 21.9 GiB is allocated by PyTorch, and 210.4 MiB is reserved by "
             "PyTorch but unallocated."),
         OomKind::kDevice},
        {"pytorch_2_x",
         make<c10::OutOfMemoryError>(
             "CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total capacity of "
             "23.55 GiB of which 0 bytes is free. Including non-PyTorch memory, this process has "
             "23.54 GiB memory in use. If reserved but unallocated memory is large try setting "
             "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."),
         OomKind::kDevice},
        {"cuda_malloc_async",
         make<c10::OutOfMemoryError>(
             "Allocation on device 0 would exceed allowed memory. (out of memory)\nCurrently "
             "allocated     : 7.50 GiB\nRequested         : 1.00 GiB\nDevice limit      : 8.00 "
             "GiB\nFree (according to CUDA): 0 bytes"),
         OomKind::kDevice},
        {"cuda_malloc_async_plain_error",
         make<c10::Error>("Allocation on device 0 would exceed allowed memory. (out of memory)"),
         OomKind::kDevice},
        {"sim_budget",
         make<c10::OutOfMemoryError>(
             "sim out of memory. Tried to allocate 16.00 MiB; 7.00 MiB free of 96.00 MiB budget"),
         OomKind::kDevice},
        {"raw_cuda_call", make<c10::CUDAError>("CUDA error: out of memory"), OomKind::kDevice},
        // Library OOM: statuses inside plain c10::Error text.
        {"cublas_alloc",
         make<c10::Error>(
             "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
         OomKind::kLibrary},
        {"cudnn_alloc", make<c10::Error>("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
         OomKind::kLibrary},
        {"cudnn_workspace", make<c10::Error>("cuDNN error: CUDNN_STATUS_NOT_ENOUGH_WORKSPACE"),
         OomKind::kLibrary},
        // Host OOM.
        {"bad_alloc", std::make_exception_ptr(std::bad_alloc()), OomKind::kHost},
        {"cpu_allocator",
         make<c10::Error>(
             "DefaultCPUAllocator: can't allocate memory: you tried to allocate 1099511627776 "
             "bytes. Error code 12 (Cannot allocate memory)"),
         OomKind::kHost},
        {"cpu_allocator_msvc",
         make<c10::Error>("DefaultCPUAllocator: not enough memory: you "
                          "tried to allocate 8 bytes."),
         OomKind::kHost},
        // Not OOM: fatal for the process.
        {"illegal_address",
         make<c10::Error>(
             "CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
             "asynchronously reported at some other API call"),
         OomKind::kNotOom},
        {"illegal_address_cuda_error",
         make<c10::CUDAError>("CUDA error: an illegal memory access was encountered"),
         OomKind::kNotOom},
        {"device_assert", make<c10::Error>("CUDA error: device-side assert triggered"),
         OomKind::kNotOom},
        {"nccl_oom",
         make<c10::DistBackendError>(
             "NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error (run with "
             "NCCL_DEBUG=INFO for details), NCCL version 2.20.5\nLast error:\nCuda failure 'out "
             "of memory'"),
         OomKind::kNotOom},
        {"nccl_text_in_plain_error", make<c10::Error>("NCCL WARN Cuda failure 'out of memory'"),
         OomKind::kNotOom},
        {"generic_runtime_error", make<std::runtime_error>("CUDA out of memory"), OomKind::kNotOom},
        {"value_error", make<c10::ValueError>("expected a positive value"), OomKind::kNotOom},
        {"null", nullptr, OomKind::kNotOom},
        {"not_an_exception", std::make_exception_ptr(42), OomKind::kNotOom},
    };
}

class OomClassifyTest : public ::testing::TestWithParam<Case> {};

void PrintTo(const Case& c, std::ostream* os) {
    *os << c.name;
}

TEST_P(OomClassifyTest, MatchesTheTable) {
    EXPECT_EQ(to_string(classify(GetParam().error)), std::string(to_string(GetParam().expected)));
}

INSTANTIATE_TEST_SUITE_P(Table, OomClassifyTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                             return std::string(info.param.name);
                         });

TEST(OomClassifyReal, ShapeErrorFromARealOpIsNotOom) {
    try {
        torch::matmul(torch::randn({2, 3}), torch::randn({4, 5}));
        FAIL();
    } catch (...) {
        EXPECT_EQ(classify(std::current_exception()), OomKind::kNotOom);
    }
}

TEST(OomClassifyReal, HugeHostAllocationIsHostOom) {
    try {
        at::Tensor t = torch::empty({std::int64_t{1} << 52}, torch::kUInt8);  // 4 PiB
        FAIL();
    } catch (...) {
        EXPECT_EQ(classify(std::current_exception()), OomKind::kHost);
    }
}

TEST(FatalDeviceErrors, PoisonedContextsAskForANewProcess) {
    EXPECT_TRUE(
        is_fatal_device_error("CUDA error: an illegal memory access was encountered\nCompile with "
                              "`TORCH_USE_CUDA_DSA` to enable device-side assertions."));
    EXPECT_TRUE(is_fatal_device_error("CUDA error: device-side assert triggered"));
    EXPECT_TRUE(
        is_fatal_device_error("NCCL error in: ProcessGroupNCCL.cpp:1251, unhandled cuda "
                              "error, NCCL version 2.21.5"));
    EXPECT_FALSE(is_fatal_device_error("CUDA out of memory. Tried to allocate 2.00 GiB"));
    EXPECT_FALSE(is_fatal_device_error("mat1 and mat2 shapes cannot be multiplied (4x3 and 4x3)"));
}

}  // namespace
}  // namespace loom
