#pragma once

// Process exit codes of the `loom` executable. They are part of the CLI contract (README,
// "Exit codes") and never change meaning once published.

namespace loom {

enum class ExitCode : int {
    kOk = 0,
    kFailure = 1,            // unexpected error (a bug, or an I/O failure loom cannot attribute)
    kUsageOrConfig = 2,      // bad command line or invalid job configuration
    kInputError = 3,         // unreadable or malformed input files (model, dataset, checkpoint)
    kDoesNotFit = 4,         // the OOM ladder is exhausted: the job does not fit this device
    kWorkerState = 5,        // the device is unusable before loom allocated anything
    kRunFolderBusy = 6,      // another trainer owns the run folder (loom train --wait waits)
    kRestartRequested = 75,  // a training child asks its supervisor for a restart (EX_TEMPFAIL)
    kInterrupted = 130,      // stopped by SIGINT/SIGTERM after a clean final save
};

inline int to_int(ExitCode code) {
    return static_cast<int>(code);
}

}  // namespace loom
