#include "loom/device/oom_classify.h"

#include <c10/util/Exception.h>

#include <array>
#include <new>

namespace loom {

namespace {

bool contains(std::string_view text, std::string_view needle) {
    return text.find(needle) != std::string_view::npos;
}

// Errors that leave the device or the process group unusable: never retried, even when their
// text mentions memory (an NCCL "Cuda failure 'out of memory'" takes the process group down).
constexpr std::array<std::string_view, 8> kFatal = {"illegal memory access",
                                                    "an illegal instruction",
                                                    "device-side assert",
                                                    "unspecified launch failure",
                                                    "NCCL",
                                                    "misaligned address",
                                                    "ECC error",
                                                    "uncorrectable"};

constexpr std::array<std::string_view, 4> kLibrary = {
    "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED", "CUDNN_STATUS_NOT_ENOUGH_WORKSPACE",
    "CUSOLVER_STATUS_ALLOC_FAILED"};

constexpr std::array<std::string_view, 4> kDevice = {
    "CUDA out of memory", "CUDA error: out of memory", "(out of memory)", "HIP out of memory"};

constexpr std::array<std::string_view, 2> kHost = {"DefaultCPUAllocator: can't allocate memory",
                                                   "DefaultCPUAllocator: not enough memory"};

template <std::size_t N>
bool any_of(std::string_view text, const std::array<std::string_view, N>& needles) {
    for (std::string_view n : needles) {
        if (contains(text, n)) return true;
    }
    return false;
}

}  // namespace

const char* to_string(OomKind kind) {
    switch (kind) {
        case OomKind::kNotOom: return "not_oom";
        case OomKind::kDevice: return "device_oom";
        case OomKind::kLibrary: return "library_oom";
        case OomKind::kHost: return "host_oom";
    }
    return "not_oom";
}

bool is_fatal_device_error(std::string_view message) {
    return any_of(message, kFatal);
}

OomKind classify_message(std::string_view message) {
    if (any_of(message, kFatal)) return OomKind::kNotOom;
    if (any_of(message, kLibrary)) return OomKind::kLibrary;
    if (any_of(message, kHost)) return OomKind::kHost;
    if (any_of(message, kDevice)) return OomKind::kDevice;
    return OomKind::kNotOom;
}

OomKind classify(std::exception_ptr error) {
    if (!error) return OomKind::kNotOom;
    try {
        std::rethrow_exception(error);
    } catch (const c10::OutOfMemoryError&) {
        return OomKind::kDevice;
    } catch (const c10::DistError&) {
        return OomKind::kNotOom;  // NCCL/Gloo: the process group is gone
    } catch (const c10::Error& e) {
        // CUDAError ("CUDA error: out of memory" from raw CUDA calls), cuBLAS/cuDNN statuses,
        // and the CPU allocator's failure are plain c10::Errors: their text is all there is.
        return classify_message(e.what_without_backtrace());
    } catch (const std::bad_alloc&) {
        return OomKind::kHost;
    } catch (const std::exception& e) {
        const OomKind kind = classify_message(e.what());
        return kind == OomKind::kHost ? kind : OomKind::kNotOom;
    } catch (...) {
        return OomKind::kNotOom;
    }
}

}  // namespace loom
