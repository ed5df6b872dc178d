// loom devices: what loom can train on.

#include <torch/cuda.h>

#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include "command.h"
#include "loom/core/byte_size.h"
#include "loom/core/exit_codes.h"
#include "options.h"

namespace loom::cli {

namespace {

// MemTotal and MemAvailable from /proc/meminfo, in bytes (0 when unavailable).
std::pair<std::uint64_t, std::uint64_t> host_memory() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    std::uint64_t value = 0;
    std::string unit;
    std::uint64_t total = 0;
    std::uint64_t available = 0;
    while (in >> key >> value >> unit) {
        if (key == "MemTotal:") total = value * 1024;
        if (key == "MemAvailable:") available = value * 1024;
    }
    return {total, available};
}

cxxopts::Options devices_options() {
    cxxopts::Options options("loom devices", "List the devices loom can train on.");
    return options;
}

int run_devices(const std::vector<std::string>& args) {
    cxxopts::Options options = devices_options();
    parse_options(options, "devices", args);
    const auto [total, available] = host_memory();
    std::cout << std::left << std::setw(8) << "DEVICE" << std::setw(36) << "DESCRIPTION"
              << std::setw(14) << "TOTAL"
              << "FREE\n";
    std::ostringstream cpu;
    cpu << "host CPU, " << std::thread::hardware_concurrency() << " threads";
    std::cout << std::setw(8) << "cpu" << std::setw(36) << cpu.str() << std::setw(14)
              << format_bytes_human(total) << format_bytes_human(available) << "\n";
    const std::size_t cuda_count = torch::cuda::device_count();
    for (std::size_t i = 0; i < cuda_count; ++i) {
        std::cout << std::setw(8) << ("cuda:" + std::to_string(i)) << "CUDA device\n";
    }
    if (cuda_count == 0) std::cout << "(no CUDA device visible)\n";
    return to_int(ExitCode::kOk);
}

}  // namespace

Command make_devices_command() {
    return {"devices", "List the devices loom can train on, with their memory",
            [] { return devices_options().help(); }, run_devices};
}

}  // namespace loom::cli
