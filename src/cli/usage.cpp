#include "usage.h"

#include <torch/version.h>

#include <algorithm>
#include <sstream>

#include "command.h"
#include "loom/core/version.h"

namespace loom::cli {

std::string version_line() {
    std::ostringstream out;
    out << "loom " << kVersion << " (LibTorch " << TORCH_VERSION << "; tested with torch "
        << kTestedTorchVersion << ")";
    return out.str();
}

std::string general_usage() {
    std::ostringstream out;
    out << version_line() << "\n"
        << "A LoRA trainer for diffusion models that recovers from out-of-memory errors.\n\n"
        << "Usage: loom COMMAND [OPTIONS]\n"
        << "       loom --version\n\n"
        << "Commands:\n";
    std::size_t width = 0;
    for (const Command& c : all_commands()) width = std::max(width, c.name.size());
    for (const Command& c : all_commands()) {
        out << "  " << c.name << std::string(width - c.name.size() + 2, ' ') << c.summary << "\n";
    }
    out << "\nRun `loom help COMMAND` for a command's options and their defaults.\n"
        << "\nExit codes: 0 ok, 1 unexpected error, 2 bad command line or job configuration,\n"
        << "3 unreadable or malformed input files, 4 the job does not fit the device,\n"
        << "5 the device is unusable (start on a fresh worker), 130 interrupted.\n";
    return out.str();
}

}  // namespace loom::cli
