#include "child_process.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <thread>

#include "loom/core/error.h"
#include "loom/core/exit_codes.h"
#include "supervisor.h"

namespace loom::cli {

namespace {

// ---- the parent's signals -------------------------------------------------------------------
// The first SIGINT/SIGTERM asks the child to stop (SIGTERM: it checkpoints after its running
// step); a second one ends it at once (SIGKILL). The handler only reads and writes these.

static_assert(sizeof(pid_t) <= sizeof(sig_atomic_t), "the child's pid lives in a sig_atomic_t");
volatile sig_atomic_t g_stop_signals = 0;  // how many arrived
// The running children, one per rank (one without --nproc); 0 where none runs.
volatile sig_atomic_t g_children[kMaxRanks] = {};

void on_parent_signal(int) {
    const int count = g_stop_signals + 1;
    g_stop_signals = count;
    for (int r = 0; r < kMaxRanks; ++r) {
        const pid_t child = g_children[r];
        if (child > 0) ::kill(child, count == 1 ? SIGTERM : SIGKILL);
    }
}

void stop_signal_set(sigset_t* set) {
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
}

// The handlers ParentSignals replaced, restored when it ends.
struct sigaction g_previous_int {};
struct sigaction g_previous_term {};

std::string signal_name(int sig) {
    switch (sig) {
        case SIGKILL: return "SIGKILL";
        case SIGSEGV: return "SIGSEGV";
        case SIGBUS: return "SIGBUS";
        case SIGABRT: return "SIGABRT";
        case SIGILL: return "SIGILL";
        case SIGFPE: return "SIGFPE";
        case SIGTERM: return "SIGTERM";
        case SIGINT: return "SIGINT";
        case SIGHUP: return "SIGHUP";
        case SIGQUIT: return "SIGQUIT";
        case SIGPIPE: return "SIGPIPE";
        case SIGTRAP: return "SIGTRAP";
        case SIGSYS: return "SIGSYS";
        case SIGXCPU: return "SIGXCPU";
        case SIGXFSZ: return "SIGXFSZ";
        case SIGUSR1: return "SIGUSR1";
        case SIGUSR2: return "SIGUSR2";
        case SIGALRM: return "SIGALRM";
        default: return {};
    }
}

// A TCP port on the loopback nobody listens on now, for the ranks' rendezvous (rank 0's store).
int free_loopback_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw Error(std::string("cannot open a socket: ") + std::strerror(errno));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    socklen_t length = sizeof(address);
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                    ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
    const int err = errno;
    ::close(fd);
    if (!ok) throw Error(std::string("cannot find a free port: ") + std::strerror(err));
    return ntohs(address.sin_port);
}

// This process's environment with rank `rank` of `ranks`' variables, as torchrun sets them.
std::vector<std::string> rank_environment(int rank, int ranks, int port) {
    static const char* const kSet[] = {"RANK",        "WORLD_SIZE",  "LOCAL_RANK",
                                       "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE"};
    std::vector<std::string> out;
    for (char** e = environ; *e != nullptr; ++e) {
        const std::string entry = *e;
        const std::string name = entry.substr(0, entry.find('='));
        if (std::find(std::begin(kSet), std::end(kSet), name) == std::end(kSet))
            out.push_back(entry);
    }
    out.push_back("RANK=" + std::to_string(rank));
    out.push_back("LOCAL_RANK=" + std::to_string(rank));
    out.push_back("WORLD_SIZE=" + std::to_string(ranks));
    out.push_back("LOCAL_WORLD_SIZE=" + std::to_string(ranks));
    out.push_back("MASTER_ADDR=127.0.0.1");
    out.push_back("MASTER_PORT=" + std::to_string(port));
    return out;
}

// Forks and execs this executable (/proc/self/exe) with `args` as the child of slot `slot`
// (its rank), with `environment` (empty: this process's); stdout and stderr are shared.
pid_t spawn_child(const std::vector<std::string>& args, int slot = 0,
                  const std::vector<std::string>& environment = {}) {
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (const std::string& e : environment) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    char** const child_environ = environment.empty() ? environ : envp.data();
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    // Stop signals stay blocked across the fork: the parent handles one only once g_child names
    // the new child, and the child resets the handlers to the default before it takes any.
    sigset_t stops;
    sigset_t previous;
    stop_signal_set(&stops);
    ::sigprocmask(SIG_BLOCK, &stops, &previous);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
        // Async-signal-safe calls only until exec.
        ::signal(SIGINT, SIG_DFL);
        ::signal(SIGTERM, SIG_DFL);
        // A parent killed with SIGKILL must not leave an orphan training on: the child is then
        // asked to stop as on Ctrl-C (checkpoint after the running step, exit 130).
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (::getppid() != parent) ::_exit(to_int(ExitCode::kInterrupted));
        ::sigprocmask(SIG_SETMASK, &previous, nullptr);
        ::execve("/proc/self/exe", argv.data(), child_environ);
        constexpr char kMessage[] =
            "error: cannot start the training process: exec of "
            "/proc/self/exe failed\n";
        if (::write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1) < 0) {
        }
        ::_exit(to_int(ExitCode::kFailure));
    }
    const int fork_errno = errno;
    if (pid > 0) g_children[slot] = pid;
    ::sigprocmask(SIG_SETMASK, &previous, nullptr);
    if (pid < 0) {
        throw Error(std::string("cannot start the training process: fork failed: ") +
                    std::strerror(fork_errno));
    }
    return pid;
}

// Waits for the child `pid` (P_ALL: whichever child ends first; the pid is returned in it); a
// signal to the parent meanwhile is forwarded by the handler.
ChildEnd wait_child(pid_t& pid) {
    // Wait without reaping first, so the pid stays the child's (a zombie) while the handler may
    // still signal it, then forget it, then reap.
    siginfo_t info{};
    const idtype_t which = pid > 0 ? P_PID : P_ALL;
    while (::waitid(which, static_cast<id_t>(std::max<pid_t>(pid, 0)), &info, WEXITED | WNOWAIT) <
           0) {
        if (errno != EINTR) {
            throw Error(std::string("waiting for the training process failed: ") +
                        std::strerror(errno));
        }
    }
    pid = info.si_pid;
    for (int r = 0; r < kMaxRanks; ++r) {
        if (g_children[r] == pid) g_children[r] = 0;
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            throw Error(std::string("waiting for the training process failed: ") +
                        std::strerror(errno));
        }
    }
    ChildEnd end;
    if (WIFSIGNALED(status)) {
        end.signaled = true;
        end.code = WTERMSIG(status);
    } else {
        end.code = WEXITSTATUS(status);
    }
    return end;
}

}  // namespace

ParentSignals::ParentSignals() {
    struct sigaction action {};
    action.sa_handler = on_parent_signal;
    stop_signal_set(&action.sa_mask);  // one handler at a time: the count stays exact
    action.sa_flags = SA_RESTART;
    ::sigaction(SIGINT, &action, &g_previous_int);
    ::sigaction(SIGTERM, &action, &g_previous_term);
}

ParentSignals::~ParentSignals() {
    ::sigaction(SIGINT, &g_previous_int, nullptr);
    ::sigaction(SIGTERM, &g_previous_term, nullptr);
}

bool stop_requested() {
    return g_stop_signals > 0;
}

int stop_signal_count() {
    return g_stop_signals;
}

// "signal 9 (SIGKILL)", "exit 75"
std::string ChildEnd::cause() const {
    if (!signaled) return "exit " + std::to_string(code);
    const std::string name = signal_name(code);
    return "signal " + std::to_string(code) + (name.empty() ? "" : " (" + name + ")");
}

bool ChildEnd::stopped_from_outside() const {
    return signaled && (code == SIGINT || code == SIGTERM);
}

bool ChildEnd::restartable() const {
    if (signaled) return !stopped_from_outside();
    return code == to_int(ExitCode::kRestartRequested);
}

bool ChildEnd::memory_related() const {
    return signaled && code == SIGKILL;
}

std::vector<std::string> child_arguments(const std::vector<std::string>& train_args, bool restart) {
    std::vector<std::string> out = {"loom", "train", "--no-supervise"};
    bool options_ended = false;
    for (std::size_t i = 0; i < train_args.size(); ++i) {
        const std::string& a = train_args[i];
        if (a == "--") options_ended = true;
        if (restart && !options_ended && (a == "--fresh" || a.rfind("--fresh=", 0) == 0)) continue;
        if (!options_ended && a == "--nproc") {
            ++i;  // and its value
            continue;
        }
        if (!options_ended && a.rfind("--nproc=", 0) == 0) continue;
        out.push_back(a);
    }
    return out;
}

ChildEnd run_child(const std::vector<std::string>& args, int ranks) {
    if (ranks <= 1) {
        pid_t pid = spawn_child(args);
        return wait_child(pid);
    }
    const int port = free_loopback_port();
    std::vector<pid_t> running;
    for (int r = 0; r < ranks; ++r) {
        running.push_back(spawn_child(args, r, rank_environment(r, ranks, port)));
    }
    std::optional<ChildEnd> decisive;
    while (!running.empty()) {
        pid_t pid = 0;
        const ChildEnd end = wait_child(pid);
        running.erase(std::remove(running.begin(), running.end(), pid), running.end());
        const bool clean = !end.signaled && end.code == 0;
        if (clean || decisive) continue;
        decisive = end;
        if (stop_requested()) continue;  // every rank checkpoints and stops by itself
        for (const pid_t other : running) ::kill(other, SIGKILL);
    }
    return decisive.value_or(ChildEnd{});
}

// Sleeps `seconds`, or less when a stop signal arrives.
void back_off(double seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!stop_requested() && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

}  // namespace loom::cli
