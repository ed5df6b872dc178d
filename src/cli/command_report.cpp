// loom report RUN_DIR [-o FILE]: the run folder as one self-contained HTML page (loss, memory with
// every OOM and plan change, throughput, samples, the plan timeline, the store's history for the
// job's key). `loom train` writes the same page into the run folder at every checkpoint and at
// the end.

#include <filesystem>
#include <iostream>

#include "command.h"
#include "loom/core/error.h"
#include "loom/core/exit_codes.h"
#include "loom/core/logging.h"
#include "loom/report/html_report.h"
#include "loom/report/store_history.h"
#include "loom/store/store_location.h"
#include "options.h"

namespace loom::cli {

namespace fs = std::filesystem;

namespace {

cxxopts::Options report_options() {
    cxxopts::Options options(
        "loom report",
        "Write a run folder's report: one HTML file with no external files (open it from disk "
        "in any browser) showing the loss, device memory with every out-of-memory error and plan "
        "change, throughput with the plan in effect, the preview samples, the plan timeline and "
        "the stable-config store's history for the job. `loom train` refreshes RUN_DIR/report.html "
        "at every checkpoint and at the end.");
    options.positional_help("RUN_DIR");
    options.add_options()("o,output", "The HTML file to write (default: RUN_DIR/report.html)",
                          cxxopts::value<std::string>(), "FILE")(
        "store",
        "The stable-config store to read the job's history from (default: $LOOM_HOME/stable.db, "
        "else ~/.local/share/loom/stable.db); a missing file means no history",
        cxxopts::value<std::string>(),
        "PATH")("run", "The run folder", cxxopts::value<std::string>(), "RUN_DIR");
    options.parse_positional({"run"});
    return options;
}

int run_report(const std::vector<std::string>& args) {
    cxxopts::Options options = report_options();
    const cxxopts::ParseResult parsed = parse_options(options, "report", args);
    if (!parsed.count("run")) {
        throw UsageError("loom report: give a run folder (see `loom help report`)");
    }
    const fs::path run = parsed["run"].as<std::string>();
    std::error_code ec;
    if (!fs::is_directory(run, ec)) {
        throw UsageError("loom report: " + run.string() +
                         " is not a folder (give a run folder: "
                         "TRAINING_FOLDER/NAME, where loom train wrote events.jsonl)");
    }
    if (!fs::exists(run / "events.jsonl") && !fs::exists(run / "metrics.jsonl")) {
        throw Error("loom report: " + run.string() +
                    " has no events.jsonl or metrics.jsonl: it is not a loom run folder");
    }
    const fs::path out =
        parsed.count("output") ? fs::path(parsed["output"].as<std::string>()) : run / "report.html";
    std::optional<report::StoreHistory> history;
    try {
        history = report::read_history_file(parsed.count("store")
                                                ? fs::path(parsed["store"].as<std::string>())
                                                : store::default_store_path(),
                                            run);
    } catch (const Error& e) {
        logger("report").warn("{}; the report has no store history", e.what());
    }
    report::write_report(run, out, history);
    std::cout << out.string() << "\n";
    return to_int(ExitCode::kOk);
}

}  // namespace

Command make_report_command() {
    return {"report", "Write a run's report: one HTML page with its plots and recoveries",
            [] { return report_options().help(); }, run_report};
}

}  // namespace loom::cli
