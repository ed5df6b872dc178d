#pragma once

// One trainer per run folder. A trainer owns its run folder through an exclusive flock(2) on
// <run folder>/loom.lock, which also holds the owner's PID, host name and start time for the
// message a second trainer prints. The kernel releases the lock when the owning process dies, so
// a SIGKILL leaves nothing stale behind.
//
// Ownership is shared with the processes that inherit the locked file (its open file
// description): the supervisor takes the locks of its job's run folders and its training child
// uses them (the descriptors and folders travel in $LOOM_RUN_LOCKS), so the child never competes
// with its own parent. Several ranks of one run will share it the same way.
//
// On a filesystem where flock does not work (some network mounts answer ENOLCK or EOPNOTSUPP)
// the lock falls back, with a warning, to a PID file: the folder is taken when loom.lock names a
// process that no longer runs on this host (or names none), and the file is removed on release.
// Read-only commands (loom stable, loom doctor) never take the lock.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

namespace loom {

// What loom.lock says about its owner.
struct RunLockOwner {
    long pid = 0;
    std::string host;
    std::string started;  // ISO 8601 UTC

    // "PID 4242 on host gpu-7, started 2026-12-01T09:30:00Z"
    std::string describe() const;
};

struct RunLockOptions {
    bool wait = false;      // wait until the folder is free instead of failing
    bool use_flock = true;  // false: the PID-file fallback (also chosen when flock fails)
    // While waiting: asked every poll; true gives up waiting (RunFolderBusyError).
    std::function<bool()> cancelled;
};

class RunLock {
  public:
    // Takes the run folder `root` (created when missing). Throws RunFolderBusyError naming the
    // owner when another trainer has it (unless options.wait), IoError when the lock file
    // cannot be opened.
    static RunLock acquire(const std::filesystem::path& root, RunLockOptions options = {});

    RunLock(RunLock&& other) noexcept;
    RunLock& operator=(RunLock&& other) noexcept;
    RunLock(const RunLock&) = delete;
    RunLock& operator=(const RunLock&) = delete;
    ~RunLock();  // releases (unless inherited: the process that took it releases it)

    const std::filesystem::path& file() const { return file_; }
    bool inherited() const { return inherited_; }
    bool pid_file() const { return pid_file_; }
    int fd() const { return fd_; }

    // Lets child processes use this lock: the descriptor stays open across exec and
    // $LOOM_RUN_LOCKS names it for the folder (appended to what is already there).
    void share_with_children();

    // The owner loom.lock in `root` names, if it names one (for messages and tests).
    static std::optional<RunLockOwner> read_owner(const std::filesystem::path& root);

  private:
    RunLock() = default;
    void release() noexcept;

    std::filesystem::path file_;
    int fd_ = -1;
    bool inherited_ = false;
    bool pid_file_ = false;
};

}  // namespace loom
