#include "stop_signal.h"

#include <signal.h>
#include <unistd.h>

namespace loom::cli {

namespace {

std::atomic<bool> g_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");

constexpr char kNotice[] =
    "\nloom: stop requested; stopping after the running step with a checkpoint\n";

void on_stop_signal(int) {
    // Only async-signal-safe calls here: an atomic exchange and write(2).
    if (!g_stop_requested.exchange(true)) {
        if (::write(STDERR_FILENO, kNotice, sizeof(kNotice) - 1) < 0) {
        }
    }
}

}  // namespace

const std::atomic<bool>& install_stop_handlers() {
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;  // file and data-loader I/O goes on undisturbed
    ::sigaction(SIGINT, &action, nullptr);
    ::sigaction(SIGTERM, &action, nullptr);
    return g_stop_requested;
}

}  // namespace loom::cli
