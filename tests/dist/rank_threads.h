#pragma once

// The ranks of a test's process group as threads of the test, over loopback.

#include <chrono>
#include <functional>

#include "loom/dist/process_group.h"

namespace loom::dist {

// A port nothing listens on now (the kernel's pick for an ephemeral bind).
int free_port();

// Runs `body(group)` on `world` ranks, each a thread with its own process group; a rank that
// throws fails the test with its message.
void on_ranks(int world, const std::function<void(ProcessGroup&)>& body,
              std::chrono::milliseconds timeout = std::chrono::milliseconds(20000));

}  // namespace loom::dist
