// The `loom` executable: dispatches to a subcommand and maps errors to exit codes. This is the
// one place that catches loom::Error for reporting (CONVENTIONS.md "Errors").

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "command.h"
#include "loom/core/error.h"
#include "loom/core/exit_codes.h"
#include "loom/data/dataset.h"
#include "loom/device/faults.h"
#include "loom/device/oom_classify.h"
#include "loom/guard/log_wording.h"
#include "rank_faults.h"
#include "usage.h"

namespace {

int dispatch(const std::vector<std::string>& args) {
    using loom::cli::find_command;
    if (args.empty()) {
        std::cerr << loom::cli::general_usage();
        return loom::to_int(loom::ExitCode::kUsageOrConfig);
    }
    if (args[0] == "--version" || args[0] == "-V" || args[0] == "version") {
        std::cout << loom::cli::version_line() << "\n";
        return loom::to_int(loom::ExitCode::kOk);
    }
    if (args[0] == "--help" || args[0] == "-h") {
        std::cout << loom::cli::general_usage();
        return loom::to_int(loom::ExitCode::kOk);
    }
    std::size_t consumed = 0;
    const loom::cli::Command* command = find_command(args, consumed);
    if (command == nullptr) {
        // "loom stable" alone: name every command it begins.
        std::string matches;
        for (const loom::cli::Command& c : loom::cli::all_commands()) {
            if (c.name.rfind(args[0] + " ", 0) != 0) continue;
            matches += (matches.empty() ? "`loom " : ", `loom ") + c.name + "`";
        }
        const std::string hint = matches.empty() ? "" : " (did you mean " + matches + "?)";
        throw loom::UsageError("unknown command '" + args[0] + "'" + hint +
                               "; run `loom help` for the list");
    }
    const std::vector<std::string> rest(args.begin() + static_cast<long>(consumed), args.end());
    for (const std::string& a : rest) {
        if (a == "--help" || a == "-h") {
            std::cout << command->help();
            return loom::to_int(loom::ExitCode::kOk);
        }
    }
    return command->run(rest);
}

}  // namespace

int main(int argc, char** argv) {
    const std::vector<std::string> args(argv + 1, argv + argc);
    try {
        // A malformed LOOM_FAULTS is an error at start-up, before any work (--faults, where a
        // command has it, replaces it later).
        loom::configure_faults(loom::cli::faults_in_this_rank(std::nullopt));
        return dispatch(args);
    } catch (const loom::ConfigError& e) {
        std::cerr << "error: " << e.what() << "\n";
        return loom::to_int(loom::ExitCode::kUsageOrConfig);
    } catch (const loom::UsageError& e) {
        std::cerr << "error: " << e.what() << "\n";
        return loom::to_int(loom::ExitCode::kUsageOrConfig);
    } catch (const loom::DoesNotFitError& e) {
        std::cerr << loom::guard::to_line(loom::guard::OutcomeLine{
                         loom::guard::OutcomeLine::Kind::kDoesNotFit, e.what()})
                  << "\n";
        return loom::to_int(loom::ExitCode::kDoesNotFit);
    } catch (const loom::WorkerStateError& e) {
        std::cerr << loom::guard::to_line(loom::guard::OutcomeLine{
                         loom::guard::OutcomeLine::Kind::kWorkerState, e.what()})
                  << "\n";
        return loom::to_int(loom::ExitCode::kWorkerState);
    } catch (const loom::RunFolderBusyError& e) {
        std::cerr << "error: " << e.what() << "\n";
        return loom::to_int(loom::ExitCode::kRunFolderBusy);
    } catch (const loom::IoError& e) {
        std::cerr << "error: " << e.what() << "\n";
        return loom::to_int(loom::ExitCode::kInputError);
    } catch (const loom::FormatError& e) {
        std::cerr << "error: " << e.what() << "\n";
        return loom::to_int(loom::ExitCode::kInputError);
    } catch (const loom::data::DatasetError& e) {
        // A dataset loom cannot train on (missing, empty, a pair missing): bad input files.
        std::cerr << "error: " << e.what() << "\n";
        return loom::to_int(loom::ExitCode::kInputError);
    } catch (const std::exception& e) {
        std::cerr << "error: " << e.what() << "\n";
        if (loom::is_fatal_device_error(e.what())) {
            // The CUDA context (or process group) is poisoned: only a new process can go on.
            std::cerr << "error: the device is unusable in this process; a new process resumes "
                         "from the last checkpoint (the supervisor restarts it by itself)\n";
            return loom::to_int(loom::ExitCode::kRestartRequested);
        }
        return loom::to_int(loom::ExitCode::kFailure);
    }
}
