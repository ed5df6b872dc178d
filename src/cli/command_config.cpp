// loom config check JOB.yaml... : load, validate and print the fully resolved job.

#include <iostream>

#include "command.h"
#include "loom/config/emit.h"
#include "loom/config/load.h"
#include "loom/core/error.h"
#include "loom/core/exit_codes.h"
#include "loom/core/logging.h"
#include "options.h"

namespace loom::cli {

namespace {

cxxopts::Options config_check_options() {
    cxxopts::Options options(
        "loom config check",
        "Load one or more ai-toolkit-style job files, validate them, and print each fully "
        "resolved job (every default filled in) as YAML on stdout. Warnings go to stderr. Exit "
        "code 0 when every job is valid, 2 on the first configuration error.");
    options.positional_help("JOB.yaml [JOB.yaml ...]");
    add_job_options(options);
    options.add_options()("jobs", "Job files", cxxopts::value<std::vector<std::string>>());
    options.parse_positional({"jobs"});
    return options;
}

int run_config_check(const std::vector<std::string>& args) {
    cxxopts::Options options = config_check_options();
    const cxxopts::ParseResult parsed = parse_options(options, "config check", args);
    if (!parsed.count("jobs")) {
        throw UsageError(
            "loom config check: give at least one job file (see `loom help config check`)");
    }
    config::LoadOptions load_options;
    if (parsed.count("set")) load_options.overrides = parsed["set"].as<std::vector<std::string>>();
    load_options.strict = parsed.count("strict") > 0;

    const auto jobs = parsed["jobs"].as<std::vector<std::string>>();
    for (std::size_t i = 0; i < jobs.size(); ++i) {
        const config::LoadedJob loaded = config::load_job_file(jobs[i], load_options);
        for (const std::string& line : loaded.applied_overrides) {
            logger("config").info("{}: --set {}", jobs[i], line);
        }
        for (const config::Diagnostic& d : loaded.warnings) std::cerr << d.to_string() << "\n";
        if (i > 0) std::cout << "---\n";
        std::cout << config::emit_job_yaml(loaded.job);
        std::cerr << jobs[i] << ": valid job '" << loaded.job.config.name << "' ("
                  << loaded.warnings.size()
                  << (loaded.warnings.size() == 1 ? " warning" : " warnings") << ")\n";
    }
    return to_int(ExitCode::kOk);
}

}  // namespace

Command make_config_check_command() {
    return {"config check", "Validate job files and print them fully resolved",
            [] { return config_check_options().help(); }, run_config_check};
}

}  // namespace loom::cli
