// One trainer per run folder (train/run_lock.h): a second owner is refused with the first one's
// PID, host and start time; the lock goes with its owner; a shared (inherited) descriptor is the
// same ownership; --wait gives up when told to; the PID-file fallback.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "loom/core/error.h"
#include "loom/train/run_lock.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

class RunLockTest : public ::testing::Test {
  protected:
    void SetUp() override {
        root = fs::temp_directory_path() / ("loom_lock_" + std::to_string(::getpid())) / "run";
        fs::remove_all(root.parent_path());
        ::unsetenv("LOOM_RUN_LOCKS");
    }
    void TearDown() override {
        fs::remove_all(root.parent_path());
        ::unsetenv("LOOM_RUN_LOCKS");
    }
    std::string host() const {
        char buf[256] = {};
        ::gethostname(buf, sizeof(buf) - 1);
        return buf;
    }
    fs::path root;
};

TEST_F(RunLockTest, ASecondOwnerIsRefusedWithTheFirstOnesFacts) {
    const RunLock first = RunLock::acquire(root);  // creates the folder
    EXPECT_TRUE(fs::is_directory(root));
    EXPECT_EQ(first.file(), root / "loom.lock");
    const std::optional<RunLockOwner> owner = RunLock::read_owner(root);
    ASSERT_TRUE(owner);
    EXPECT_EQ(owner->pid, ::getpid());
    EXPECT_EQ(owner->host, host());
    EXPECT_EQ(owner->started.size(), 20u);  // 2026-12-01T09:30:00Z
    // Another open file description of the same file: flock refuses it, even in this process.
    try {
        RunLock::acquire(root);
        FAIL() << "a second owner was let in";
    } catch (const RunFolderBusyError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("run folder " + root.string() + " is in use by another loom train (PID " +
                         std::to_string(::getpid()) + " on host " + host() + ", started "),
                  std::string::npos)
            << m;
        EXPECT_NE(m.find("--wait"), std::string::npos) << m;
    }
}

TEST_F(RunLockTest, TheLockGoesWithItsOwner) {
    { const RunLock first = RunLock::acquire(root); }
    EXPECT_NO_THROW(RunLock::acquire(root));  // released by the destructor
    // A process that dies holding it (SIGKILL: no destructor runs) leaves nothing stale.
    const pid_t child = ::fork();
    if (child == 0) {
        const RunLock held = RunLock::acquire(root);
        ::kill(::getpid(), SIGKILL);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    EXPECT_EQ(RunLock::read_owner(root)->pid, child);  // its facts remain, its lock does not
    EXPECT_NO_THROW(RunLock::acquire(root));
}

TEST_F(RunLockTest, ASharedDescriptorIsTheSameOwnership) {
    RunLock parent = RunLock::acquire(root);
    parent.share_with_children();
    const std::string shared = std::getenv("LOOM_RUN_LOCKS");
    EXPECT_EQ(shared, std::to_string(parent.fd()) + "=" + parent.file().string() + "\n");
    {
        // What a supervised child does: it finds its parent's descriptor and trains under it.
        const RunLock child = RunLock::acquire(root);
        EXPECT_TRUE(child.inherited());
        EXPECT_EQ(child.fd(), parent.fd());
    }
    // The child's end does not release the parent's ownership.
    ::unsetenv("LOOM_RUN_LOCKS");
    EXPECT_THROW(RunLock::acquire(root), RunFolderBusyError);
    // A variable naming a descriptor of another file is not ownership.
    ::setenv("LOOM_RUN_LOCKS", "0=/etc/passwd\n", 1);
    EXPECT_THROW(RunLock::acquire(root), RunFolderBusyError);
}

TEST_F(RunLockTest, WaitingGivesUpWhenCancelled) {
    const RunLock first = RunLock::acquire(root);
    RunLockOptions o;
    o.wait = true;
    int polls = 0;
    o.cancelled = [&] { return ++polls >= 3; };
    try {
        RunLock::acquire(root, o);
        FAIL() << "the wait did not end";
    } catch (const RunFolderBusyError& e) {
        EXPECT_NE(std::string(e.what()).find("stopped waiting"), std::string::npos) << e.what();
    }
    EXPECT_EQ(polls, 3);
}

TEST_F(RunLockTest, PidFileFallbackForFilesystemsWithoutFlock) {
    RunLockOptions no_flock;
    no_flock.use_flock = false;
    // A file naming a process of this host that no longer runs is stale: taken over.
    const pid_t dead = ::fork();
    if (dead == 0) ::_exit(0);
    ::waitpid(dead, nullptr, 0);
    fs::create_directories(root);
    std::ofstream(root / "loom.lock")
        << "pid: " << dead << "\nhost: " << host() << "\nstarted: 2026-01-01T00:00:00Z\n";
    {
        const RunLock lock = RunLock::acquire(root, no_flock);
        EXPECT_TRUE(lock.pid_file());
        EXPECT_EQ(RunLock::read_owner(root)->pid, ::getpid());
    }
    EXPECT_FALSE(fs::exists(root / "loom.lock"));  // removed on release
    // A live process of this host (the test's parent) owns it: refused.
    std::ofstream(root / "loom.lock")
        << "pid: " << ::getppid() << "\nhost: " << host() << "\nstarted: 2026-01-01T00:00:00Z\n";
    EXPECT_THROW(RunLock::acquire(root, no_flock), RunFolderBusyError);
    // Another host's owner cannot be checked from here: refused, never taken over.
    std::ofstream(root / "loom.lock") << "pid: 1\nhost: some-other-host\nstarted: x\n";
    EXPECT_THROW(RunLock::acquire(root, no_flock), RunFolderBusyError);
    EXPECT_TRUE(fs::exists(root / "loom.lock"));  // a refused trainer removes nothing
}

}  // namespace
}  // namespace loom
