// loom devices [--vram SIZE] [--faults RULES]: the devices loom can train on, with memory.

#include <iomanip>
#include <iostream>
#include <optional>

#include "command.h"
#include "loom/core/byte_size.h"
#include "loom/core/error.h"
#include "loom/core/exit_codes.h"
#include "loom/device/device.h"
#include "loom/device/faults.h"
#include "options.h"

namespace loom::cli {

namespace {

cxxopts::Options devices_options() {
    cxxopts::Options options("loom devices",
                             "List the devices loom can train on, with total and free memory. "
                             "`sim` is the simulated accelerator; its total is the --vram budget.");
    options.add_options()("vram",
                          "Memory cap: the sim budget, or the CUDA allocator's limit "
                          "(e.g. 96MiB, 8GiB; default: none)",
                          cxxopts::value<std::string>(), "SIZE")(
        "faults",
        "Fault-injection rules, as LOOM_FAULTS (e.g. dirty; default: $LOOM_FAULTS or none)",
        cxxopts::value<std::string>(), "RULES");
    return options;
}

void print_row(const std::string& name, const std::string& description, const MemoryStats& s,
               bool has_memory) {
    std::cout << std::left << std::setw(8) << name << std::setw(52) << description;
    if (has_memory) {
        std::cout << std::setw(13) << format_bytes_human(s.total) << format_bytes_human(s.free);
    } else {
        std::cout << std::setw(13) << "-"
                  << "-";
    }
    std::cout << "\n";
}

int run_devices(const std::vector<std::string>& args) {
    cxxopts::Options options = devices_options();
    const cxxopts::ParseResult parsed = parse_options(options, "devices", args);
    std::optional<std::uint64_t> vram;
    if (parsed.count("vram")) {
        try {
            vram = parse_byte_size(parsed["vram"].as<std::string>());
        } catch (const Error& e) {
            throw UsageError(std::string("loom devices: --vram: ") + e.what());
        }
    }
    configure_faults(parsed.count("faults")
                         ? std::optional<std::string>(parsed["faults"].as<std::string>())
                         : std::nullopt);

    std::cout << std::left << std::setw(8) << "DEVICE" << std::setw(52) << "DESCRIPTION"
              << std::setw(13) << "TOTAL"
              << "FREE\n";
    {
        auto cpu = open_device({DeviceKind::kCpu});
        print_row("cpu", cpu->description(), cpu->stats(), true);
    }
    if (vram) {
        auto sim = open_device({DeviceKind::kSim}, vram);
        print_row("sim", sim->description(), sim->stats(), true);
    } else {
        print_row("sim", "sim (simulated accelerator; give --vram SIZE)", {}, false);
    }
    const int count = cuda_device_count();
    for (int i = 0; i < count; ++i) {
        auto cuda = open_device({DeviceKind::kCuda, i}, vram);
        print_row(cuda->spec().to_string(), cuda->description(), cuda->stats(), true);
    }
    if (count == 0) std::cout << "(no CUDA device visible)\n";
    return to_int(ExitCode::kOk);
}

}  // namespace

Command make_devices_command() {
    return {"devices", "List the devices loom can train on, with their memory",
            [] { return devices_options().help(); }, run_devices};
}

}  // namespace loom::cli
