#pragma once

// A `loom` subcommand: its name ("config check"), a one-line summary, its cxxopts help, and the
// function that runs it with the arguments after the name. Commands return an exit code
// (loom/core/exit_codes.h) and throw loom::Error for main() to report.

#include <functional>
#include <string>
#include <vector>

namespace loom::cli {

struct Command {
    std::string name;
    std::string summary;
    std::function<std::string()> help;
    std::function<int(const std::vector<std::string>& args)> run;
};

// Every command, in the order `loom help` lists them.
const std::vector<Command>& all_commands();

// The command whose name is the longest prefix of `words` ("config", "check", ...), or nullptr;
// `consumed` receives how many words the name took.
const Command* find_command(const std::vector<std::string>& words, std::size_t& consumed);

// Commands, one factory per file.
Command make_config_check_command();
Command make_devices_command();
Command make_doctor_command();
Command make_eval_command();
Command make_inspect_command();
Command make_train_command();
Command make_report_command();
Command make_sample_command();
Command make_stable_list_command();
Command make_stable_show_command();
Command make_stable_export_command();
Command make_stable_forget_command();
Command make_help_command();

// argv-style vector for cxxopts, which parses (argc, argv).
class ArgvBuffer {
  public:
    ArgvBuffer(const std::string& program, const std::vector<std::string>& args);
    int argc() const { return static_cast<int>(pointers_.size()); }
    const char* const* argv() const { return pointers_.data(); }

  private:
    std::vector<std::string> storage_;
    std::vector<const char*> pointers_;
};

}  // namespace loom::cli
