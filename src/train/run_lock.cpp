#include "loom/train/run_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <sstream>
#include <thread>

#include "loom/core/error.h"
#include "loom/core/logging.h"
#include "train_log.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLockFile = "loom.lock";
constexpr const char* kSharedLocksVariable = "LOOM_RUN_LOCKS";
constexpr auto kPollInterval = std::chrono::milliseconds(200);

std::string host_name() {
    char buf[256] = {};
    if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
    return buf;
}

std::string utc_now() {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    ::gmtime_r(&now, &tm);
    char buf[32];
    std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

std::string owner_text(const RunLockOwner& o) {
    return "pid: " + std::to_string(o.pid) + "\nhost: " + o.host + "\nstarted: " + o.started + "\n";
}

RunLockOwner parse_owner(const std::string& text) {
    RunLockOwner o;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        const std::size_t colon = line.find(": ");
        if (colon == std::string::npos) continue;
        const std::string key = line.substr(0, colon);
        const std::string value = line.substr(colon + 2);
        if (key == "pid") o.pid = std::strtol(value.c_str(), nullptr, 10);
        if (key == "host") o.host = value;
        if (key == "started") o.started = value;
    }
    return o;
}

std::string read_all(int fd) {
    std::string out;
    char buf[512];
    off_t at = 0;
    for (ssize_t n; (n = ::pread(fd, buf, sizeof(buf), at)) > 0; at += n) out.append(buf, n);
    return out;
}

void write_owner(int fd, const fs::path& file) {
    const std::string text = owner_text({static_cast<long>(::getpid()), host_name(), utc_now()});
    if (::ftruncate(fd, 0) != 0 ||
        ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
        // The lock itself holds; only the message a second trainer prints loses its facts.
        train_log().warn("{}: cannot record this trainer as the owner: {}", file.string(),
                         std::strerror(errno));
    }
}

[[noreturn]] void busy(const fs::path& root, const std::optional<RunLockOwner>& owner,
                       const std::string& extra = "") {
    const std::string who =
        owner && owner->pid > 0 ? owner->describe() : std::string("an unknown process");
    throw RunFolderBusyError(
        "run folder " + root.string() + " is in use by another loom train (" + who + ")" + extra +
        "; wait for it to finish, rerun with --wait to start when it does, or stop it (a "
        "stopped run resumes from its last checkpoint)");
}

// A process with this PID exists on this host (EPERM: it exists, owned by someone else).
bool alive(long pid) {
    return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

// The descriptor $LOOM_RUN_LOCKS names for `file`, when it really is a locked descriptor of that
// file (inherited from the process that took the lock).
int inherited_descriptor(const fs::path& file) {
    const char* shared = std::getenv(kSharedLocksVariable);
    if (shared == nullptr) return -1;
    struct stat want {};
    if (::stat(file.c_str(), &want) != 0) return -1;
    std::istringstream in(shared);
    std::string entry;
    while (std::getline(in, entry)) {
        const std::size_t eq = entry.find('=');
        if (eq == std::string::npos) continue;
        const int fd = std::atoi(entry.substr(0, eq).c_str());
        struct stat got {};
        if (fd < 0 || ::fstat(fd, &got) != 0) continue;
        if (got.st_dev != want.st_dev || got.st_ino != want.st_ino) continue;
        // The same open file description as the owner's: re-locking it succeeds at once.
        if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
    }
    return -1;
}

void wait_a_little(const RunLockOptions& options, const fs::path& root,
                   const std::optional<RunLockOwner>& owner) {
    if (options.cancelled && options.cancelled()) busy(root, owner, "; stopped waiting");
    std::this_thread::sleep_for(kPollInterval);
}

}  // namespace

std::string RunLockOwner::describe() const {
    return "PID " + std::to_string(pid) + " on host " + (host.empty() ? "?" : host) + ", started " +
           (started.empty() ? "?" : started);
}

std::optional<RunLockOwner> RunLock::read_owner(const fs::path& root) {
    const int fd = ::open((root / kLockFile).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    const RunLockOwner o = parse_owner(read_all(fd));
    ::close(fd);
    if (o.pid <= 0) return std::nullopt;
    return o;
}

RunLock RunLock::acquire(const fs::path& root, RunLockOptions options) {
    std::error_code ec;
    fs::create_directories(root, ec);
    if (ec) throw IoError(root.string(), "cannot create the run folder: " + ec.message());
    RunLock lock;
    lock.file_ = root / kLockFile;
    if (const int fd = inherited_descriptor(lock.file_); fd >= 0) {
        lock.fd_ = fd;
        lock.inherited_ = true;
        return lock;
    }
    lock.fd_ = ::open(lock.file_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock.fd_ < 0) {
        throw IoError(lock.file_.string(), std::string("cannot open the run folder's lock file: ") +
                                               std::strerror(errno));
    }
    bool announced = false;
    while (options.use_flock) {
        if (::flock(lock.fd_, LOCK_EX | LOCK_NB) == 0) {
            write_owner(lock.fd_, lock.file_);
            return lock;
        }
        if (errno == EINTR) continue;
        if (errno != EWOULDBLOCK) {
            train_log().warn(
                "{}: this filesystem does not support flock ({}); falling back to a PID file, "
                "which cannot see a trainer on another host that shares the folder",
                lock.file_.string(), std::strerror(errno));
            options.use_flock = false;
            break;
        }
        const std::optional<RunLockOwner> owner = read_owner(root);
        if (!options.wait) busy(root, owner);
        if (!announced) {
            train_log().warn("waiting for run folder {}: in use by {}", root.string(),
                             owner ? owner->describe() : std::string("another loom train"));
            announced = true;
        }
        wait_a_little(options, root, owner);
    }
    // PID-file fallback: taken when the file names no process that still runs on this host.
    lock.pid_file_ = true;
    while (true) {
        const RunLockOwner named = parse_owner(read_all(lock.fd_));
        const std::optional<RunLockOwner> owner =
            named.pid > 0 ? std::optional<RunLockOwner>(named) : std::nullopt;
        const bool taken =
            owner && owner->pid != ::getpid() && (owner->host != host_name() || alive(owner->pid));
        if (!taken) {
            write_owner(lock.fd_, lock.file_);
            return lock;
        }
        if (!options.wait) busy(root, owner);
        if (!announced) {
            train_log().warn("waiting for run folder {}: in use by {}", root.string(),
                             owner->describe());
            announced = true;
        }
        wait_a_little(options, root, owner);
    }
}

RunLock::RunLock(RunLock&& other) noexcept
    : file_(std::move(other.file_)),
      fd_(other.fd_),
      inherited_(other.inherited_),
      pid_file_(other.pid_file_) {
    other.fd_ = -1;
}

RunLock& RunLock::operator=(RunLock&& other) noexcept {
    if (this != &other) {
        release();
        file_ = std::move(other.file_);
        fd_ = other.fd_;
        inherited_ = other.inherited_;
        pid_file_ = other.pid_file_;
        other.fd_ = -1;
    }
    return *this;
}

RunLock::~RunLock() {
    release();
}

void RunLock::release() noexcept {
    if (fd_ < 0) return;
    if (inherited_) {
        // The owner (the process that took the lock) releases it; this copy just goes.
        fd_ = -1;
        return;
    }
    if (pid_file_) {
        // Only a file that still names this process is ours to remove.
        if (parse_owner(read_all(fd_)).pid == ::getpid()) ::unlink(file_.c_str());
    }
    ::close(fd_);  // the kernel drops the flock with the last descriptor of the file
    fd_ = -1;
}

void RunLock::share_with_children() {
    if (fd_ < 0) return;
    const int flags = ::fcntl(fd_, F_GETFD);
    if (flags >= 0) ::fcntl(fd_, F_SETFD, flags & ~FD_CLOEXEC);
    const char* before = std::getenv(kSharedLocksVariable);
    std::string value = before ? before : "";
    if (!value.empty() && value.back() != '\n') value += '\n';
    value += std::to_string(fd_) + "=" + file_.string() + "\n";
    ::setenv(kSharedLocksVariable, value.c_str(), 1);
}

}  // namespace loom
