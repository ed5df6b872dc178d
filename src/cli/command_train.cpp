// loom train JOB.yaml: run every process of a job, resuming run folders that have checkpoints.

#include <iostream>

#include "command.h"
#include "loom/config/load.h"
#include "loom/core/byte_size.h"
#include "loom/core/error.h"
#include "loom/core/exit_codes.h"
#include "loom/core/logging.h"
#include "loom/device/faults.h"
#include "loom/train/trainer.h"
#include "options.h"

namespace loom::cli {

namespace {

cxxopts::Options train_options() {
    cxxopts::Options options("loom train",
                             "Train the LoRA(s) a job describes. A run folder with checkpoints is "
                             "resumed from its newest complete one.");
    options.positional_help("JOB.yaml");
    add_job_options(options);
    options.add_options()("job", "Job file", cxxopts::value<std::string>())(
        "device", "Device: cuda, cuda:N, cpu or sim (default: the job's process.device)",
        cxxopts::value<std::string>(),
        "DEVICE")("vram", "Memory cap: the sim budget or the CUDA limit (default: oom.vram_limit)",
                  cxxopts::value<std::string>(),
                  "SIZE")("faults", "Fault-injection rules (default: $LOOM_FAULTS or none)",
                          cxxopts::value<std::string>(), "RULES")(
        "fresh", "Start over even when the run folder has checkpoints (default: off)")(
        "stop-after", "Stop after N steps without a final save, as if killed (default: none)",
        cxxopts::value<long long>(), "N");
    options.parse_positional({"job"});
    return options;
}

int run_train(const std::vector<std::string>& args) {
    cxxopts::Options options = train_options();
    const cxxopts::ParseResult parsed = parse_options(options, "train", args);
    if (!parsed.count("job"))
        throw UsageError("loom train: give a job file (see `loom help train`)");
    config::LoadOptions load;
    if (parsed.count("set")) load.overrides = parsed["set"].as<std::vector<std::string>>();
    load.strict = parsed.count("strict") > 0;
    const std::string path = parsed["job"].as<std::string>();
    const config::LoadedJob loaded = config::load_job_file(path, load);
    for (const auto& line : loaded.applied_overrides) logger("config").info("--set {}", line);
    for (const auto& d : loaded.warnings) std::cerr << d.to_string() << "\n";
    configure_faults(parsed.count("faults")
                         ? std::optional<std::string>(parsed["faults"].as<std::string>())
                         : std::nullopt);
    TrainOverrides o;
    if (parsed.count("device")) o.device = parsed["device"].as<std::string>();
    if (parsed.count("vram")) {
        try {
            o.vram = parse_byte_size(parsed["vram"].as<std::string>());
        } catch (const Error& e) {
            throw UsageError(std::string("loom train: --vram: ") + e.what());
        }
    }
    o.fresh = parsed.count("fresh") > 0;
    if (parsed.count("stop-after")) o.stop_after_steps = parsed["stop-after"].as<long long>();
    for (std::size_t i = 0; i < loaded.job.config.process.size(); ++i) {
        const TrainSummary s = train_process(loaded.job, i, o);
        if (s.final_lora.empty()) {
            std::cout << "stopped at step " << s.end_step << "; rerun to resume from "
                      << s.run_folder.string() << "\n";
            continue;
        }
        std::cout << "LoRA:    " << s.final_lora.string() << "\n"
                  << "samples: " << (s.run_folder / "samples").string() << "\n"
                  << "metrics: " << (s.run_folder / "metrics.jsonl").string() << "\n"
                  << "log:     " << (s.run_folder / "loom.log").string() << "\n";
    }
    return to_int(ExitCode::kOk);
}

}  // namespace

Command make_train_command() {
    return {"train", "Train the LoRA a job describes (resumes an existing run folder)",
            [] { return train_options().help(); }, run_train};
}

}  // namespace loom::cli
