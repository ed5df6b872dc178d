// loom train JOB.yaml: run every process of a job, resuming run folders that have checkpoints.
// By default the training runs in a child process under the supervisor (supervisor.h);
// --no-supervise (which is also how the child is started) trains in this process.
//
// Several processes (data-parallel, DESIGN.md "several GPUs"): `--nproc N` has the supervisor
// start N ranks; under torchrun (`torchrun --no-python --nproc-per-node N loom train JOB`) each
// process finds its rank in the environment and trains in process, torchrun being the
// supervisor (its --max-restarts restarts the group). Either way each rank joins the c10d group
// and trains its share of every global batch.

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "command.h"
#include "loom/config/load.h"
#include "loom/core/byte_size.h"
#include "loom/core/error.h"
#include "loom/core/exit_codes.h"
#include "loom/core/logging.h"
#include "loom/device/faults.h"
#include "loom/dist/process_group.h"
#include "loom/dist/rank.h"
#include "loom/guard/log_wording.h"
#include "loom/report/html_report.h"
#include "loom/report/store_history.h"
#include "loom/store/store_location.h"
#include "loom/store/store_recorder.h"
#include "loom/train/trainer.h"
#include "options.h"
#include "rank_faults.h"
#include "stop_signal.h"
#include "supervisor.h"

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
        "wait",
        "When another loom train owns the run folder, wait for it to finish instead of "
        "stopping with exit code 6 (default: off)")(
        "no-supervise",
        "Train in this process: no child process, no restart after a crash or the host's "
        "out-of-memory killer (default: off, training runs in a supervised child)")(
        "stop-after", "Stop after N steps without a final save, as if killed (default: none)",
        cxxopts::value<long long>(), "N")(
        "nproc",
        "Train on N processes of this machine, one rank each (data-parallel: every step trains "
        "N times the job's batch; on CUDA rank r uses cuda:r). Multi-node: launch with "
        "`torchrun --no-python ... loom train JOB` instead (default: 1)",
        cxxopts::value<int>(), "N")(
        "store",
        "The stable-config database: runs, OOMs and stable plans are recorded there, and a job "
        "starts from the stable plan it knows (default: $LOOM_HOME/stable.db, else "
        "~/.local/share/loom/stable.db)",
        cxxopts::value<std::string>(), "PATH");
    options.parse_positional({"job"});
    return options;
}

// Trains every process in order in this process; SIGINT/SIGTERM stop it after the running step
// with a checkpoint (exit 130).
// report.html in the run folder, refreshed; a report that cannot be written is a warning, never
// the run's failure.
void refresh_report(const std::filesystem::path& run,
                    const std::optional<std::filesystem::path>& store_file,
                    const std::string& error = {}) {
    try {
        std::optional<report::StoreHistory> history;
        if (store_file) history = report::read_history_file(*store_file, run);
        report::write_report(run, run / "report.html", history, error);
    } catch (const std::exception& e) {
        logger("report").warn("report.html not written: {}", e.what());
    }
}

// How long a rank waits for the others at a collective before it takes them for gone
// ($LOOM_DIST_TIMEOUT seconds; 1800 by default, Gloo's own default in PyTorch: one rank may
// still be loading a large model, or rank 0 rendering a video preview, while the others wait).
std::chrono::milliseconds dist_timeout() {
    double seconds = 1800.0;
    if (const char* text = std::getenv("LOOM_DIST_TIMEOUT"); text != nullptr) {
        char* end = nullptr;
        seconds = std::strtod(text, &end);
        if (end == text || *end != '\0' || !(seconds > 0.0)) {
            throw UsageError(std::string("LOOM_DIST_TIMEOUT is '") + text +
                             "'; it must be a number of seconds above 0");
        }
    }
    return std::chrono::milliseconds(static_cast<long long>(seconds * 1000.0));
}

int train_in_process(const config::Job& job, TrainOverrides o,
                     std::optional<std::filesystem::path> store_file,
                     const dist::RankFacts& facts) {
    o.stop_requested = &install_stop_handlers();
    // Several ranks: this process joins the others (rank 0 hosts the rendezvous); the ranks
    // other than 0 keep no store and print nothing of the run's files.
    std::unique_ptr<dist::ProcessGroup> group;
    if (facts.launched) {
        group = dist::ProcessGroup::open(facts, dist_timeout());
        o.group = group.get();
        if (!facts.leader()) store_file.reset();
    }
    std::optional<store::StoreRecorder> store;
    if (store_file) {
        store.emplace(*store_file);
        o.plan_store = &*store;
    }
    o.after_checkpoint = [&](const std::filesystem::path& run) { refresh_report(run, store_file); };
    for (std::size_t i = 0; i < job.config.process.size(); ++i) {
        const config::ProcessConfig& process = job.config.process[i];
        const std::filesystem::path run =
            std::filesystem::path(*process.training_folder) / *process.name;
        TrainSummary s;
        try {
            s = train_process(job, i, o);
        } catch (const RunFolderBusyError&) {
            throw;  // another trainer's folder: its report is its own
        } catch (const std::exception& e) {
            if (facts.leader() && std::filesystem::exists(run / "events.jsonl"))
                refresh_report(run, store_file, e.what());
            throw;
        }
        if (!facts.leader()) {
            if (s.interrupted) return to_int(ExitCode::kInterrupted);
            continue;
        }
        refresh_report(s.run_folder, store_file);
        if (s.final_lora.empty()) {
            std::cout << "stopped at step " << s.end_step << "; rerun to resume from "
                      << s.run_folder.string() << "\n";
            if (s.interrupted) return to_int(ExitCode::kInterrupted);
            continue;
        }
        std::string loras;
        for (const auto& f : s.final_loras) loras += (loras.empty() ? "" : ", ") + f.string();
        std::cout << "LoRA:    " << (loras.empty() ? s.final_lora.string() : loras) << "\n"
                  << "samples: " << (s.run_folder / "samples").string() << "\n"
                  << "metrics: " << (s.run_folder / "metrics.jsonl").string() << "\n"
                  << "log:     " << (s.run_folder / "loom.log").string() << "\n"
                  << "events:  " << (s.run_folder / "events.jsonl").string() << " ("
                  << guard::recovered_counts_text({s.ooms, s.plan_changes, 0, {}}) << ")\n"
                  << "plan:    " << (s.run_folder / "plan.yaml").string() << " (" << s.final_plan
                  << ")\n"
                  << "report:  " << (s.run_folder / "report.html").string() << "\n";
        if (s.reused_stable_id) {
            std::cout << "reused:  stable plan #" << *s.reused_stable_id << " of "
                      << store->file().string() << "\n";
        }
        if (std::filesystem::exists(s.run_folder / "stable.yaml")) {
            std::cout << "stable:  " << (s.run_folder / "stable.yaml").string();
            if (const std::optional<std::int64_t> id =
                    store ? store->last_stable_id() : std::nullopt) {
                std::cout << " (#" << *id << " in " << store->file().string() << ")";
            }
            std::cout << "\n";
        }
    }
    return to_int(ExitCode::kOk);
}

// ai-toolkit fine-tunes the whole model when a process has no network section; loom trains
// LoRAs only, so it says what it trains instead of quietly training something else.
void warn_full_fine_tunes(const config::Job& job) {
    const auto& processes = job.config.process;
    for (std::size_t i = 0; i < processes.size(); ++i) {
        const config::ProcessConfig& p = processes[i];
        if (p.choices.network_given) continue;
        logger("config").warn(
            "config.process.{} has no network section: ai-toolkit would fine-tune the whole "
            "model, which loom does not support yet; loom trains a LoRA of rank {} and alpha {} "
            "instead (add a network section to choose)",
            i, p.network.linear, *p.network.linear_alpha);
    }
}

int run_train(const std::vector<std::string>& args) {
    cxxopts::Options options = train_options();
    const cxxopts::ParseResult parsed = parse_options(options, "train", args);
    if (!parsed.count("job"))
        throw UsageError("loom train: give a job file (see `loom help train`)");
    // Under torchrun (RANK and WORLD_SIZE set) torchrun supervises: each rank trains in process.
    const dist::RankFacts facts = dist::rank_from_environment(dist::process_environment());
    const int nproc = parsed.count("nproc") ? parsed["nproc"].as<int>() : 1;
    if (nproc < 1 || nproc > kMaxRanks) {
        throw UsageError("loom train: --nproc " + std::to_string(nproc) + ": give 1 to " +
                         std::to_string(kMaxRanks) + " processes");
    }
    if (nproc > 1 && facts.launched) {
        throw UsageError("loom train: --nproc starts the ranks itself, but this process is rank " +
                         std::to_string(facts.rank) + " of " + std::to_string(facts.world_size) +
                         " already (WORLD_SIZE is set, as torchrun sets it); drop --nproc");
    }
    if (nproc > 1 && parsed.count("no-supervise")) {
        throw UsageError(
            "loom train: --nproc starts and supervises the ranks; it cannot be combined with "
            "--no-supervise (to start the ranks yourself, set RANK, WORLD_SIZE, MASTER_ADDR and "
            "MASTER_PORT as torchrun does)");
    }
    const bool supervise = parsed.count("no-supervise") == 0 && !facts.launched;
    config::LoadOptions load;
    if (parsed.count("set")) load.overrides = parsed["set"].as<std::vector<std::string>>();
    load.strict = parsed.count("strict") > 0;
    const std::string path = parsed["job"].as<std::string>();
    const config::LoadedJob loaded = config::load_job_file(path, load);
    // Under the supervisor the child loads the job again and reports these itself.
    if (!supervise) {
        for (const auto& line : loaded.applied_overrides) logger("config").info("--set {}", line);
        for (const auto& d : loaded.warnings) std::cerr << d.to_string() << "\n";
        warn_full_fine_tunes(loaded.job);
    }
    configure_faults(faults_in_this_rank(
        parsed.count("faults") ? std::optional<std::string>(parsed["faults"].as<std::string>())
                               : std::nullopt));
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
    o.wait_for_run_folder = parsed.count("wait") > 0;
    if (parsed.count("stop-after")) o.stop_after_steps = parsed["stop-after"].as<long long>();
    // The supervised child gets the same arguments, --store included.
    if (supervise) return supervise_training(loaded.job, args, o.wait_for_run_folder, nproc);
    std::optional<std::filesystem::path> store_file;
    if (parsed.count("store")) {
        store_file = parsed["store"].as<std::string>();
    } else {
        try {
            store_file = store::default_store_path();
        } catch (const Error& e) {
            // No home to keep a store in: train without one rather than not at all.
            logger("store").warn("{}; this run is not recorded in a stable-config store", e.what());
        }
    }
    return train_in_process(loaded.job, o, store_file, facts);
}

}  // namespace

Command make_train_command() {
    return {"train", "Train the LoRA a job describes (resumes an existing run folder)",
            [] { return train_options().help(); }, run_train};
}

}  // namespace loom::cli
