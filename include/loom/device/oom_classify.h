#pragma once

// Is this exception an out-of-memory error, and of which memory? By exception type first
// (c10::OutOfMemoryError is device OOM, never matched by its English text), then by the
// cuBLAS/cuDNN allocation statuses c10 embeds in plain c10::Error messages, then host memory
// (std::bad_alloc, the CPU allocator's failure). Everything else — illegal memory access, NCCL
// errors, shape errors — is not OOM and stays fatal (reference/oom-anchors.md §4).

#include <exception>
#include <string_view>

namespace loom {

enum class OomKind {
    kNotOom,   // fatal: rethrow
    kDevice,   // the device allocator ran out (CUDA caching / async allocator, sim budget)
    kLibrary,  // a CUDA library failed to allocate its workspace or handle (cuBLAS, cuDNN)
    kHost,     // host RAM (std::bad_alloc, c10's CPU allocator)
};

const char* to_string(OomKind kind);

OomKind classify(std::exception_ptr error);

// The text rules alone, for messages whose exception type is unknown (log lines, c10::Error).
OomKind classify_message(std::string_view message);

// An error that leaves the device context or the process group unusable (illegal memory access,
// device-side assert, NCCL, ECC, ...): nothing in this process can continue, but a fresh process
// can — `loom train` exits with ExitCode::kRestartRequested so its supervisor restarts it.
bool is_fatal_device_error(std::string_view message);

}  // namespace loom
