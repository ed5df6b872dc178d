// Host-RAM lines (host_kill_line.h). Without an OOM message, a SIGKILL is how Linux ends a
// process that took too much RAM: the trainers' launchers only report the signal or its exit
// code (128 + 9 = 137, or -9 from Python's subprocess).

#include "host_kill_line.h"

#include <array>
#include <string>

#include "log_text.h"

namespace loom::doctor::detail {

namespace {

// "exit code 137", "exit status -9", "exitcode  : -9 (pid: 812)", "return code = -9".
bool killed_exit_code(const std::string& lower) {
    static constexpr std::array<std::string_view, 8> kKeys = {
        "exit code",  "exit status", "exitcode",         "return code",
        "returncode", "exit_code",   "exited with code", "exit value"};
    for (std::string_view key : kKeys) {
        for (std::size_t pos = lower.find(key); pos != std::string::npos;
             pos = lower.find(key, pos + 1)) {
            std::size_t i = pos + key.size();
            while (i < lower.size() && (lower[i] == ' ' || lower[i] == ':' || lower[i] == '=')) {
                ++i;
            }
            const std::string_view rest = std::string_view(lower).substr(i);
            for (std::string_view code : {std::string_view("137"), std::string_view("-9")}) {
                if (starts_with(rest, code) &&
                    (rest.size() == code.size() || !is_digit(rest[code.size()]))) {
                    return true;
                }
            }
        }
    }
    return false;
}

// A shell's report of a killed job: "Killed", "./train.sh: line 4:  8123 Killed   python ...",
// "zsh: killed     python train.py".
bool shell_killed(std::string_view s) {
    if (s == "Killed" || starts_with(s, "zsh: killed ")) return true;
    for (std::size_t pos = s.find(" Killed"); pos != std::string_view::npos;
         pos = s.find(" Killed", pos + 1)) {
        std::size_t i = pos;
        while (i > 0 && s[i - 1] == ' ') --i;
        const std::size_t digits_end = i;
        while (i > 0 && is_digit(s[i - 1])) --i;
        const std::size_t after = pos + 7;
        if (i < digits_end && (after == s.size() || s[after] == ' ')) return true;
    }
    return false;
}

}  // namespace

bool is_host_kill_line(std::string_view s) {
    static constexpr std::array<std::string_view, 9> kWords = {"Out of memory: Killed process",
                                                               "Out of memory: Kill process",
                                                               "invoked oom-killer",
                                                               "oom-kill:",
                                                               "oom_reaper: reaped process",
                                                               "SIGKILL",
                                                               "The paging file is too small",
                                                               "std::bad_alloc",
                                                               "_ArrayMemoryError"};
    for (std::string_view w : kWords) {
        if (contains(s, w)) return true;
    }
    if (s == "MemoryError" || starts_with(s, "MemoryError:") || contains(s, " MemoryError: ")) {
        return true;
    }
    if (shell_killed(s)) return true;
    return killed_exit_code(lower_ascii(s));
}

}  // namespace loom::doctor::detail
