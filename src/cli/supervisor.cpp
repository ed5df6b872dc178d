#include "supervisor.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "loom/core/error.h"
#include "loom/core/exit_codes.h"
#include "loom/core/logging.h"
#include "loom/guard/event_log.h"
#include "loom/guard/ladder_policy.h"
#include "loom/guard/plan.h"
#include "loom/report/html_report.h"
#include "loom/train/run_folder.h"
#include "loom/train/run_lock.h"

namespace loom::cli {

namespace {

namespace fs = std::filesystem;

constexpr double kFirstBackoffSeconds = 0.5;
constexpr double kMaxBackoffSeconds = 5.0;

Logger supervisor_log() {
    return logger("guard");
}

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

// Installs the forwarding handlers for the supervisor's lifetime.
class ParentSignals {
  public:
    ParentSignals() {
        struct sigaction action {};
        action.sa_handler = on_parent_signal;
        stop_signal_set(&action.sa_mask);  // one handler at a time: the count stays exact
        action.sa_flags = SA_RESTART;
        ::sigaction(SIGINT, &action, &previous_int_);
        ::sigaction(SIGTERM, &action, &previous_term_);
    }
    ~ParentSignals() {
        ::sigaction(SIGINT, &previous_int_, nullptr);
        ::sigaction(SIGTERM, &previous_term_, nullptr);
    }
    ParentSignals(const ParentSignals&) = delete;
    ParentSignals& operator=(const ParentSignals&) = delete;

  private:
    struct sigaction previous_int_ {};
    struct sigaction previous_term_ {};
};

bool stop_requested() {
    return g_stop_signals > 0;
}

// ---- how a child ended ------------------------------------------------------------------------

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

struct ChildEnd {
    bool signaled = false;
    int code = 0;  // the exit code, or the signal when signaled

    // "signal 9 (SIGKILL)", "exit 75"
    std::string cause() const {
        if (!signaled) return "exit " + std::to_string(code);
        const std::string name = signal_name(code);
        return "signal " + std::to_string(code) + (name.empty() ? "" : " (" + name + ")");
    }
    bool stopped_from_outside() const { return signaled && (code == SIGINT || code == SIGTERM); }
    // Deaths that cannot be caught in-process, and a child asking for a restart.
    bool restartable() const {
        if (signaled) return !stopped_from_outside();
        return code == to_int(ExitCode::kRestartRequested);
    }
    // SIGKILL without a word: taken for the host's out-of-memory killer.
    bool memory_related() const { return signaled && code == SIGKILL; }
    bool operator==(const ChildEnd& o) const { return signaled == o.signaled && code == o.code; }
};

// ---- spawning ---------------------------------------------------------------------------------

// `loom train --no-supervise <args>`; restarts drop --fresh so the child resumes from the run
// folder's checkpoint and plan.yaml, and --nproc stays with the parent (the children are the
// ranks it starts). The flag goes first so that a `--` among the arguments cannot turn it into a
// positional.
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

// The training child, or with `ranks` > 1 one child per rank (torchrun's variables set, a
// fresh rendezvous port each time). The ranks end together: the first that ends otherwise than
// with exit 0 or on a stop request has the others ended at once with SIGKILL — they would
// otherwise wait for it until their collectives time out — and its end is the group's.
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

// 0.5 s, 1 s, 2 s, 4 s, 5 s, 5 s, ... for restart 1, 2, 3, ...
double backoff_seconds(int restart) {
    double s = kFirstBackoffSeconds;
    for (int i = 1; i < restart && s < kMaxBackoffSeconds; ++i) s *= 2.0;
    return std::min(s, kMaxBackoffSeconds);
}

// Sleeps `seconds`, or less when a stop signal arrives.
void back_off(double seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!stop_requested() && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

// ---- the run folder ---------------------------------------------------------------------------

RunFolder run_folder_of(const config::ProcessConfig& process) {
    return RunFolder(*process.training_folder, *process.name);
}

// The child runs the processes in order: a death belongs to the first one without a final LoRA.
std::size_t current_process(const config::Job& job) {
    const std::vector<config::ProcessConfig>& processes = job.config.process;
    for (std::size_t i = 0; i < processes.size(); ++i) {
        if (!fs::exists(run_folder_of(processes[i]).final_lora())) return i;
    }
    return processes.size() - 1;
}

// The host's OOM killer took the child: plan.yaml goes one rung down the host ladder (caches to
// disk, then fewer CPU threads), and the restarted child starts from it. nullopt when plan.yaml
// cannot be read (the child reports that itself).
std::optional<guard::Decision> step_down_after_death(const config::ProcessConfig& process,
                                                     const RunFolder& run) {
    guard::Plan plan;
    try {
        plan = fs::exists(run.plan_yaml()) ? guard::load_plan(run.plan_yaml())
                                           : guard::plan_from_job(process);
    } catch (const Error& e) {
        supervisor_log().warn("{}; restarting on the plan as it is", e.what());
        return std::nullopt;
    }
    guard::PolicyContext context;
    context.host_threads = static_cast<int>(std::thread::hardware_concurrency());
    guard::Decision decision = guard::decide_after_death(plan, context);
    if (decision.action == guard::Decision::Action::kRetry) {
        guard::save_plan(run.plan_yaml(), decision.plan);
    }
    return decision;
}

std::string changes_text(const std::vector<guard::KnobChange>& changes) {
    std::string out;
    for (const guard::KnobChange& c : changes) {
        if (!out.empty()) out += ", ";
        out += c.knob + " " + c.from + " -> " + c.to;
    }
    return out;
}

// "from the checkpoint at step 4" / "from the start (no checkpoint yet)"
std::string resume_point(const RunFolder& run) {
    const std::optional<std::int64_t> step = run.newest_checkpoint();
    if (!step) return "from the start (no checkpoint yet)";
    return "from the checkpoint at step " + std::to_string(*step);
}

std::string plan_summary(const RunFolder& run) {
    if (!fs::exists(run.plan_yaml())) return "not written yet";
    try {
        return run.plan_yaml().string() + " (" +
               guard::describe(guard::load_plan(run.plan_yaml())) + ")";
    } catch (const Error& e) {
        return e.what();
    }
}

// A line for both the console and the run folder's loom.log (the child is not writing to it).
void warn_in_run_log(const RunFolder& run, const std::string& line) {
    const bool logged = add_log_file(run.log_file());
    supervisor_log().warn("{}", line);
    if (logged) close_log_files();
}

// ---- giving up --------------------------------------------------------------------------------

std::string shell_quote(const std::string& s) {
    const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_./=:,@%+-", c);
    });
    if (plain) return s;
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

std::string rerun_command(const std::vector<std::string>& train_args) {
    std::string out = "loom train";
    for (const std::string& a : child_arguments(train_args, true)) {
        if (a == "loom" || a == "train" || a == "--no-supervise") continue;
        out += ' ';
        out += shell_quote(a);  // appended apart: GCC 12 warns (falsely) on " " + std::string&&
    }
    return out;
}

// "each time by signal 9 (SIGKILL)" / "by signal 9 (SIGKILL) 2 times, exit 75 once"
std::string death_counts(const std::vector<ChildEnd>& deaths) {
    std::vector<std::pair<ChildEnd, int>> counts;
    for (const ChildEnd& d : deaths) {
        auto it =
            std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == d; });
        if (it == counts.end()) {
            counts.emplace_back(d, 1);
        } else {
            ++it->second;
        }
    }
    if (counts.size() == 1) return "each time by " + counts[0].first.cause();
    std::string out = "by ";
    for (std::size_t i = 0; i < counts.size(); ++i) {
        if (i > 0) out += ", ";
        out += counts[i].first.cause() + " " +
               (counts[i].second == 1 ? "once" : std::to_string(counts[i].second) + " times");
    }
    return out;
}

// What the last cause means and what to try.
std::pair<std::string, std::string> explain(const ChildEnd& last, const RunFolder& run,
                                            const std::string& rerun, bool has_checkpoint) {
    const std::string resumes =
        has_checkpoint ? "it resumes from the last checkpoint" : "it starts over";
    if (last.memory_related()) {
        return {
            "a SIGKILL without a word is how the host's out-of-memory killer ends a process "
            "when RAM runs out (or someone ran kill -9); the restarts moved plan.yaml down "
            "the host ladder (events.jsonl lists each rung)",
            "free host RAM (close other programs, or use a machine with more RAM), then rerun `" +
                rerun + "`: " + resumes +
                " on the lighter plan; raise oom.max_restarts to allow more restarts"};
    }
    if (!last.signaled) {
        return {"the training process asked for a restart each time (exit 75)",
                "read the end of " + run.log_file().string() + " and " +
                    run.events_jsonl().string() + " for why, then rerun `" + rerun +
                    "`: " + resumes};
    }
    return {"the training process crashed (SIGBUS can also mean a full disk or /dev/shm)",
            "read the end of " + run.log_file().string() + "; rerun `" + rerun +
                " --no-supervise` to see the crash without restarts, and report it with loom.log "
                "if it repeats"};
}

int give_up(const std::vector<ChildEnd>& deaths, int max_restarts, std::size_t process_index,
            const RunFolder& run, guard::EventLog& events,
            const std::vector<std::string>& train_args) {
    const ChildEnd& last = deaths.back();
    const std::optional<std::int64_t> checkpoint = run.newest_checkpoint();
    events.record("supervisor_gave_up",
                  {{"cause", last.cause()},
                   {"deaths", static_cast<int>(deaths.size())},
                   {"restarts", static_cast<int>(deaths.size()) - 1},
                   {"max_restarts", max_restarts},
                   {"process", static_cast<int>(process_index)},
                   {"checkpoint_step", checkpoint ? *checkpoint : std::int64_t{-1}}});
    const auto [meaning, what_to_try] =
        explain(last, run, rerun_command(train_args), checkpoint.has_value());
    std::ostringstream out;
    out << "error: the training process died " << deaths.size() << " times, "
        << death_counts(deaths) << "; it was restarted " << deaths.size() - 1
        << " times (oom.max_restarts: " << max_restarts << "), so loom stops here\n"
        << "  cause:           " << meaning << "\n"
        << "  run folder:      " << run.root().string() << "\n"
        << "  last checkpoint: "
        << (checkpoint ? run.checkpoint_dir(*checkpoint).string() + " (step " +
                             std::to_string(*checkpoint) + ")"
                       : std::string("none (no attempt got to its first checkpoint)"))
        << "\n"
        << "  plan:            " << plan_summary(run) << "\n"
        << "  events:          " << run.events_jsonl().string() << "\n"
        << "  try:             " << what_to_try << "\n";
    std::cerr << out.str();
    try {  // the report says how the run ended (its history comes with the next `loom report`)
        report::write_report(run.root(), run.root() / "report.html", std::nullopt,
                             "the training process died " + std::to_string(deaths.size()) +
                                 " times (" + meaning + "); try: " + what_to_try);
    } catch (const std::exception& e) {
        supervisor_log().warn("report.html not written: {}", e.what());
    }
    const bool logged = add_log_file(run.log_file());
    supervisor_log().debug("{}", out.str());
    if (logged) close_log_files();
    return to_int(ExitCode::kFailure);
}

}  // namespace

int supervise_training(const config::Job& job, const std::vector<std::string>& train_args,
                       bool wait_for_run_folders, int ranks) {
    ParentSignals signals;
    // The parent owns every run folder of the job while it supervises; its children (restarts
    // included) train under that ownership, and a SIGKILL of the parent leaves the lock to the
    // child until it has checkpointed and gone.
    std::vector<RunLock> locks;
    RunLockOptions lock_options;
    lock_options.wait = wait_for_run_folders;
    lock_options.cancelled = [] { return stop_requested(); };
    for (const config::ProcessConfig& process : job.config.process) {
        locks.push_back(RunLock::acquire(run_folder_of(process).root(), lock_options));
        locks.back().share_with_children();
    }
    std::map<std::size_t, std::vector<ChildEnd>> deaths;  // per process
    for (bool restart = false;; restart = true) {
        if (stop_requested()) return to_int(ExitCode::kInterrupted);
        const ChildEnd end = run_child(child_arguments(train_args, restart), ranks);
        if (stop_requested()) {
            // Asked to stop: no restart. A child that finished or failed on its own says so.
            if (end.signaled && end.code == SIGKILL && g_stop_signals > 1) {
                const RunFolder run = run_folder_of(job.config.process[current_process(job)]);
                supervisor_log().warn(
                    "ended the training process at once on a second stop signal; a rerun "
                    "resumes {} in {}",
                    resume_point(run), run.root().string());
            }
            return end.signaled || end.code == to_int(ExitCode::kRestartRequested)
                       ? to_int(ExitCode::kInterrupted)
                       : end.code;
        }
        if (end.stopped_from_outside()) return to_int(ExitCode::kInterrupted);
        if (!end.restartable()) return end.code;

        const std::size_t index = current_process(job);
        const config::ProcessConfig& process = job.config.process[index];
        const RunFolder run = run_folder_of(process);
        fs::create_directories(run.root());
        guard::EventLog events(run.events_jsonl());
        std::vector<ChildEnd>& seen = deaths[index];
        seen.push_back(end);
        const int restart_number = static_cast<int>(seen.size());
        const int max_restarts = process.oom.max_restarts;
        if (restart_number > max_restarts) {
            return give_up(seen, max_restarts, index, run, events, train_args);
        }

        const double wait = backoff_seconds(restart_number);
        std::optional<guard::Decision> decision;
        if (end.memory_related()) decision = step_down_after_death(process, run);
        std::vector<guard::EventField> fields = {
            {"cause", end.cause()},
            {"attempt", restart_number},
            {"max_restarts", max_restarts},
            {"process", static_cast<int>(index)},
            {"memory_related", end.memory_related()},
            {"resume_step", run.newest_checkpoint().value_or(0)},
            {"backoff_seconds", wait}};
        fields.emplace_back(end.signaled ? "signal" : "exit_code", end.code);
        std::string plan_note = "on the same plan";
        if (decision) {
            fields.emplace_back("action", guard::to_string(decision->action));
            fields.emplace_back("rule", decision->rule);
            fields.emplace_back("reason", decision->reason);
            fields.emplace_back("changes", changes_text(decision->changes));
            fields.emplace_back("plan", guard::describe(decision->plan));
            plan_note =
                decision->action == guard::Decision::Action::kRetry
                    ? "with " + changes_text(decision->changes) + " (" + decision->rule + ")"
                    : "on the same plan (" + decision->reason + ")";
        }
        events.record("restart", fields);
        warn_in_run_log(
            run, format("the training process died ({}{}); restart {} of {} in {:.1f} s, {} {}",
                        end.cause(),
                        end.memory_related() ? ": taken for the host's out-of-memory killer" : "",
                        restart_number, max_restarts, wait, resume_point(run), plan_note));
        back_off(wait);
    }
}

}  // namespace loom::cli
