// loom doctor LOGFILE [--json]: which case of the user guide's OOM table a training log shows
// (loom's own, ai-toolkit's, kohya's or a PyTorch script's), or that host RAM ran out, the lines
// that prove it and the first change to make. Exit 0 when a case is identified, 1 when the log
// shows no OOM.

#include <iostream>

#include "command.h"
#include "loom/core/error.h"
#include "loom/core/exit_codes.h"
#include "loom/doctor/diagnosis.h"
#include "options.h"

namespace loom::cli {

namespace {

cxxopts::Options doctor_options() {
    cxxopts::Options options("loom doctor",
                             "Diagnose an out-of-memory failure from a log: loom's console "
                             "output, loom.log or events.jsonl, or an ai-toolkit, kohya "
                             "sd-scripts (kohya_ss, musubi-tuner), OneTrainer, SimpleTuner, "
                             "diffusion-pipe or PyTorch log. Prints the case of the user guide's "
                             "table (before_step_1, early_steps, sampling_only, sometimes, "
                             "video_frames, worker_state) or host_ram (the OOM killer, Killed, "
                             "exit code 137), the evidence lines and the first change to make. "
                             "Exit 0: a case was found; 1: no OOM in the log.");
    options.positional_help("LOGFILE");
    options.add_options()("json", "Print the diagnosis as one JSON object (default: off)")(
        "log", "The log file to read", cxxopts::value<std::string>(), "LOGFILE");
    options.parse_positional({"log"});
    return options;
}

int run_doctor(const std::vector<std::string>& args) {
    cxxopts::Options options = doctor_options();
    const cxxopts::ParseResult parsed = parse_options(options, "doctor", args);
    if (!parsed.count("log")) {
        throw UsageError("loom doctor: give the log file to read (see `loom help doctor`)");
    }
    const doctor::Diagnosis d = doctor::diagnose_log_file(parsed["log"].as<std::string>());
    std::cout << (parsed.count("json") ? doctor::render_json(d) : doctor::render(d));
    return to_int(d.found_oom() ? ExitCode::kOk : ExitCode::kFailure);
}

}  // namespace

Command make_doctor_command() {
    return {"doctor", "Diagnose an out-of-memory failure from a training log",
            [] { return doctor_options().help(); }, run_doctor};
}

}  // namespace loom::cli
