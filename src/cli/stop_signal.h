#pragma once

// SIGINT / SIGTERM for training in this process (`loom train --no-supervise`, which is also how
// the supervisor runs its child): the first signal asks the trainer to stop after its running
// step with a checkpoint (TrainOverrides::stop_requested), and `loom train` then exits 130.

#include <atomic>

namespace loom::cli {

// Installs SIGINT and SIGTERM handlers that set the returned process-wide flag (a lock-free
// atomic, so the handler may set it) and print one notice on stderr. Idempotent.
const std::atomic<bool>& install_stop_handlers();

}  // namespace loom::cli
