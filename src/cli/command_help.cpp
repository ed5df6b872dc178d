// loom help [COMMAND]: the command list, or one command's options with their defaults.

#include <iostream>

#include "command.h"
#include "loom/core/error.h"
#include "loom/core/exit_codes.h"
#include "usage.h"

namespace loom::cli {

namespace {

int run_help(const std::vector<std::string>& args) {
    if (args.empty()) {
        std::cout << general_usage();
        return to_int(ExitCode::kOk);
    }
    std::size_t consumed = 0;
    const Command* command = find_command(args, consumed);
    if (command == nullptr || consumed != args.size()) {
        std::string name;
        for (const std::string& a : args) name += (name.empty() ? "" : " ") + a;
        throw UsageError("loom help: no command named '" + name +
                         "'; run `loom help` for the list");
    }
    std::cout << command->help();
    return to_int(ExitCode::kOk);
}

}  // namespace

Command make_help_command() {
    return {"help", "Show the command list, or one command's options and defaults",
            [] {
                return std::string("Usage: loom help [COMMAND]\n\n") +
                       "Without COMMAND, lists every command. With it (e.g. `loom help config "
                       "check`), shows that command's options with their defaults.\n";
            },
            run_help};
}

}  // namespace loom::cli
