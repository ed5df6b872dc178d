// Sizes in out-of-memory messages (oom_message_figures.h): found by the words around them, since
// the same figure sits before its label in one PyTorch version and after it in the next.

#include "oom_message_figures.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "log_text.h"

namespace loom::doctor::detail {

namespace {

// A size as PyTorch's format_size and loom print it: "2.00 GiB", "345.12 MiB", "0 bytes".
std::optional<std::uint64_t> to_bytes(std::string_view number, std::string_view unit) {
    static constexpr std::array<std::pair<std::string_view, double>, 10> kUnits{{
        {"bytes", 1.0},
        {"B", 1.0},
        {"KiB", 1024.0},
        {"MiB", 1048576.0},
        {"GiB", 1073741824.0},
        {"TiB", 1099511627776.0},
        {"KB", 1e3},
        {"MB", 1e6},
        {"GB", 1e9},
        {"TB", 1e12},
    }};
    const double value = std::strtod(std::string(number).c_str(), nullptr);
    for (const auto& [name, factor] : kUnits) {
        if (unit == name) return static_cast<std::uint64_t>(std::llround(value * factor));
    }
    return std::nullopt;
}

// The size right after `marker`: size_after("Tried to allocate 2.00 GiB", "allocate ").
std::optional<std::uint64_t> size_after(std::string_view s, std::string_view marker) {
    const std::size_t pos = s.find(marker);
    if (pos == std::string_view::npos) return std::nullopt;
    std::string_view rest = s.substr(pos + marker.size());
    std::size_t i = 0;
    while (i < rest.size() && rest[i] == ' ') ++i;
    const std::size_t number_start = i;
    while (i < rest.size() && (is_digit(rest[i]) || rest[i] == '.')) ++i;
    if (i == number_start) return std::nullopt;
    const std::string_view number = rest.substr(number_start, i - number_start);
    while (i < rest.size() && rest[i] == ' ') ++i;
    const std::size_t unit_start = i;
    while (i < rest.size() && is_alpha(rest[i])) ++i;
    return to_bytes(number, rest.substr(unit_start, i - unit_start));
}

// The size right before `marker`: size_before("1.06 GiB free;", " free;").
std::optional<std::uint64_t> size_before(std::string_view s, std::string_view marker) {
    const std::size_t pos = s.find(marker);
    if (pos == std::string_view::npos) return std::nullopt;
    std::size_t i = pos;
    while (i > 0 && is_alpha(s[i - 1])) --i;
    const std::string_view unit = s.substr(i, pos - i);
    while (i > 0 && s[i - 1] == ' ') --i;
    const std::size_t number_end = i;
    while (i > 0 && (is_digit(s[i - 1]) || s[i - 1] == '.')) --i;
    if (i == number_end) return std::nullopt;
    return to_bytes(s.substr(i, number_end - i), unit);
}

template <class T>
void keep_first(std::optional<T>& into, const std::optional<T>& value) {
    if (!into && value) into = value;
}

// "Process 4242 has 23.64 GiB memory in use" (2.1+ lists every process NVML sees on the GPU).
std::vector<OomFigures::Process> read_processes(std::string_view s) {
    std::vector<OomFigures::Process> out;
    constexpr std::string_view kProcess = "Process ";
    for (std::size_t pos = s.find(kProcess); pos != std::string_view::npos;
         pos = s.find(kProcess, pos + kProcess.size())) {
        std::size_t i = pos + kProcess.size();
        const std::size_t pid_start = i;
        while (i < s.size() && is_digit(s[i])) ++i;
        if (i == pid_start || s.substr(i, 5) != " has ") continue;
        const std::string_view rest = s.substr(i);
        const std::size_t in_use = rest.find(" memory in use");
        const std::optional<std::uint64_t> bytes = size_after(rest, " has ");
        if (in_use == std::string_view::npos || !bytes) continue;
        out.push_back({std::string(s.substr(pid_start, i - pid_start)), *bytes});
    }
    return out;
}

}  // namespace

bool read_figures(std::string_view s, OomFigures& f) {
    OomFigures g;
    g.requested = size_after(s, "Tried to allocate ");
    // PyTorch <= 2.0: "(GPU 0; 23.69 GiB total capacity; 20.29 GiB already allocated;
    // 1.06 GiB free; 21.45 GiB reserved in total by PyTorch)".
    g.total = size_before(s, " total capacity;");
    g.allocated = size_before(s, " already allocated");
    g.free = size_before(s, " free;");
    g.reserved = size_before(s, " reserved in total by PyTorch");
    // PyTorch 2.1+ ("capacty" is a 2.1-era typo users' logs still carry).
    keep_first(g.total, size_after(s, "total capacity of "));
    keep_first(g.total, size_after(s, "total capacty of "));
    keep_first(g.free, size_before(s, " is free"));
    keep_first(g.allocated, size_before(s, " is allocated by PyTorch"));
    g.reserved_unallocated = size_before(s, " is reserved by PyTorch but unallocated");
    g.this_process = size_after(s, "this process has ");
    g.processes = read_processes(s);
    // loom's sim device: "Tried to allocate 16.00 MiB; 7.00 MiB free of 96.00 MiB budget".
    keep_first(g.free, size_before(s, " free of "));
    keep_first(g.total, size_after(s, " free of "));

    const bool any = g.requested || g.total || g.allocated || g.free || g.reserved ||
                     g.reserved_unallocated || g.this_process || !g.processes.empty();
    if (!any) return false;
    keep_first(f.requested, g.requested);
    keep_first(f.free, g.free);
    keep_first(f.total, g.total);
    keep_first(f.allocated, g.allocated);
    keep_first(f.reserved, g.reserved);
    keep_first(f.reserved_unallocated, g.reserved_unallocated);
    keep_first(f.this_process, g.this_process);
    if (f.processes.empty()) f.processes = std::move(g.processes);
    return true;
}

}  // namespace loom::doctor::detail
