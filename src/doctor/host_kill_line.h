#pragma once

// Lines that say host RAM ran out rather than the GPU: the kernel's OOM killer (dmesg's
// "Out of memory: Killed process N (python)"), a shell's bare `Killed`, exit code 137 / -9 and
// SIGKILL as launchers report them (accelerate's CalledProcessError, torchrun's ChildFailedError,
// DeepSpeed's launcher, loom's own supervisor), Python's MemoryError, numpy's "Unable to
// allocate", and Windows' "The paging file is too small". (c10's "DefaultCPUAllocator: can't
// allocate memory" is classify_message's.) Internal to the doctor layer.

#include <string_view>

namespace loom::doctor::detail {

// True when `s` (one trimmed log line) reports that the process ran out of host RAM or was
// killed the way the OOM killer kills.
bool is_host_kill_line(std::string_view s);

}  // namespace loom::doctor::detail
