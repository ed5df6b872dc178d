// loom stable list|show|export|forget: the stable-config store (loom/store/stable_store.h) from
// the command line. list and show read it, export turns a stable plan back into a job file a
// user can check and train, forget hides a plan so later runs no longer start from it.
//
// The read-only commands never create the store: a missing file means nothing was recorded yet.

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>

#include "command.h"
#include "loom/config/emit.h"
#include "loom/config/load.h"
#include "loom/core/byte_size.h"
#include "loom/core/error.h"
#include "loom/core/exit_codes.h"
#include "loom/guard/job_with_plan.h"
#include "loom/guard/plan.h"
#include "loom/io/atomic_file.h"
#include "loom/store/stable_store.h"
#include "loom/store/store_location.h"
#include "options.h"

namespace loom::cli {

namespace {

namespace fs = std::filesystem;

const char* const kStoreHelp =
    "The stable-config store (default: $LOOM_HOME/stable.db, else "
    "$XDG_DATA_HOME/loom/stable.db, else ~/.local/share/loom/stable.db)";

void add_store_option(cxxopts::Options& options) {
    options.add_options()("store", kStoreHelp, cxxopts::value<std::string>(), "PATH");
}

// An option of every subcommand that takes a stable plan's ID.
void add_id_option(cxxopts::Options& options) {
    options.add_options()("id", "Stable plan ID (the ID column of `loom stable list`)",
                          cxxopts::value<std::string>(), "ID");
    options.parse_positional({"id"});
    options.positional_help("ID");
}

// cxxopts keeps positional words it has no option for in unmatched(); a second ID would
// otherwise be ignored without a word (`loom stable forget 3 4` forgetting only #3).
void refuse_extra_arguments(const std::string& command, const cxxopts::ParseResult& parsed) {
    if (parsed.unmatched().empty()) return;
    throw UsageError("loom " + command + ": unexpected argument '" + parsed.unmatched().front() +
                     "' (see `loom help " + command + "`)");
}

fs::path store_file(const std::string& command, const cxxopts::ParseResult& parsed) {
    if (!parsed.count("store")) return store::default_store_path();
    const std::string path = parsed["store"].as<std::string>();
    if (path.empty()) throw UsageError("loom " + command + ": --store needs a file path");
    return path;
}

// The store for a command that only reads or edits existing rows; nullopt when the file does
// not exist yet (and it is not created).
std::optional<store::StableStore> open_existing(const fs::path& file) {
    std::error_code ec;
    if (!fs::exists(file, ec)) return std::nullopt;
    return store::StableStore::open(file);
}

// "3" or "#3" (as show and the training summary print it); anything else is a usage error.
std::int64_t parse_id(const std::string& command, const cxxopts::ParseResult& parsed) {
    if (!parsed.count("id")) {
        throw UsageError("loom " + command +
                         ": give the ID of a stable plan (`loom stable list` shows the IDs)");
    }
    const std::string text = parsed["id"].as<std::string>();
    const std::string digits = !text.empty() && text[0] == '#' ? text.substr(1) : text;
    const bool numeric =
        !digits.empty() && digits.size() <= 18 &&
        std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); });
    if (!numeric || std::stoll(digits) == 0) {
        throw UsageError("loom " + command + ": '" + text +
                         "' is not a stable plan ID; IDs are positive whole numbers such as 3 "
                         "(`loom stable list` shows them)");
    }
    return std::stoll(digits);
}

UsageError no_such_plan(std::int64_t id, const fs::path& file, bool file_exists) {
    return UsageError("no stable plan #" + std::to_string(id) + " in " + file.string() +
                      (file_exists ? "" : " (the file does not exist yet)") +
                      "; `loom stable list` shows the IDs");
}

// The row for `id`, or a usage error saying there is none.
store::StableRow require_row(std::optional<store::StableStore>& s, std::int64_t id,
                             const fs::path& file) {
    if (!s) throw no_such_plan(id, file, false);
    std::optional<store::StableRow> row = s->find(id);
    if (!row) throw no_such_plan(id, file, true);
    return std::move(*row);
}

std::string plan_summary(const store::StableRow& row) {
    if (row.plan.plan) return guard::describe(*row.plan.plan);
    return "(a plan this loom cannot read; `loom stable show " + std::to_string(row.id) +
           "` prints it)";
}

// "2026-11-30 08:00" from "2026-11-30T08:00:00.123Z": minutes are enough to tell rows apart.
std::string short_time(const std::string& iso) {
    if (iso.size() < 16 || iso[10] != 'T') return iso;
    return iso.substr(0, 10) + " " + iso.substr(11, 5);
}

// Columns padded to their widest cell; the last column (the plan, the longest) is not padded.
void print_table(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
    std::vector<std::size_t> width;
    for (const auto& row : rows) {
        width.resize(std::max(width.size(), row.size()), 0);
        for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
    }
    for (const auto& row : rows) {
        std::string line;
        for (std::size_t c = 0; c < row.size(); ++c) {
            line += row[c];
            if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
        }
        out << line << "\n";
    }
}

// ---- loom stable list

cxxopts::Options list_options() {
    cxxopts::Options options("loom stable list",
                             "List the plans recorded as stable, newest first: the run that "
                             "recorded them, their key (arch, "
                             "device, memory, dtype, rank, resolution, frames), how long they "
                             "trained, their peak memory and what they changed. A run with the "
                             "same key starts from the newest of them.");
    add_store_option(options);
    options.add_options()("arch", "Only this arch, e.g. sd1 or sdxl (default: every arch)",
                          cxxopts::value<std::string>(), "ARCH")(
        "device", "Only devices whose name contains this text, any case (default: every device)",
        cxxopts::value<std::string>(), "TEXT");
    return options;
}

int run_list(const std::vector<std::string>& args) {
    cxxopts::Options options = list_options();
    const cxxopts::ParseResult parsed = parse_options(options, "stable list", args);
    refuse_extra_arguments("stable list", parsed);
    const fs::path file = store_file("stable list", parsed);
    std::optional<store::StableStore> s = open_existing(file);
    if (!s) {
        std::cout << "no stable plans recorded (" << file.string() << " does not exist yet)\n";
        return to_int(ExitCode::kOk);
    }
    store::ListFilter filter;
    if (parsed.count("arch")) filter.arch = parsed["arch"].as<std::string>();
    if (parsed.count("device")) filter.device = parsed["device"].as<std::string>();
    const std::vector<store::StableRow> rows = s->list(filter);
    if (rows.empty()) {
        std::cout << "no stable plans recorded in " << file.string();
        if (filter.arch) std::cout << " for arch " << *filter.arch;
        if (filter.device) std::cout << " on a device matching '" << *filter.device << "'";
        std::cout << "\n";
        return to_int(ExitCode::kOk);
    }
    std::vector<std::vector<std::string>> table = {{"ID", "RECORDED (UTC)", "RUN", "ARCH", "DEVICE",
                                                    "MEMORY", "DTYPE", "RANK", "RES", "FRAMES",
                                                    "QTYPE", "STEPS", "PEAK", "PLAN"}};
    for (const store::StableRow& r : rows) {
        table.push_back({std::to_string(r.id), short_time(r.time), r.run_name, r.key.arch,
                         r.key.device_name, format_bytes_human(r.key.total_memory), r.key.dtype,
                         std::to_string(r.key.rank), std::to_string(r.key.max_resolution),
                         std::to_string(r.key.frames), r.key.qtype, std::to_string(r.steps_on_plan),
                         format_bytes_human(r.peak), plan_summary(r)});
    }
    print_table(std::cout, table);
    std::cout << "\n"
              << rows.size() << (rows.size() == 1 ? " stable plan" : " stable plans") << " in "
              << file.string() << "; `loom stable show ID` prints one in full\n";
    return to_int(ExitCode::kOk);
}

// ---- loom stable show

cxxopts::Options show_options() {
    cxxopts::Options options("loom stable show",
                             "Print one stable plan in full: when and by which run it was "
                             "recorded, its key, its figures, its plan.yaml, and the "
                             "out-of-memory errors recorded for the same key.");
    add_id_option(options);
    add_store_option(options);
    return options;
}

std::string indented(const std::string& text, const std::string& indent) {
    std::string out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out += indent + line + "\n";
    return out;
}

// plan_to_yaml's text without its leading comment, which speaks of a plan.yaml file in a run
// folder ("delete this file"), not of a row in the store.
std::string without_comment_header(const std::string& yaml) {
    std::size_t at = 0;
    while (at < yaml.size() && yaml[at] == '#') {
        const std::size_t end = yaml.find('\n', at);
        if (end == std::string::npos) return {};
        at = end + 1;
    }
    return yaml.substr(at);
}

std::string key_text(const guard::PlanKey& k) {
    std::ostringstream out;
    out << k.arch << ", model " << k.model_fingerprint << ", " << k.device_name << " ("
        << format_bytes_human(k.total_memory) << "), " << k.dtype << ", rank " << k.rank << ", "
        << k.max_resolution << " px, " << k.frames << (k.frames == 1 ? " frame" : " frames")
        << ", low_vram level 2 in " << k.qtype;
    return out.str();
}

void print_oom(std::ostream& out, const store::OomRow& o, std::int64_t shown_run_id) {
    out << "  #" << o.id << "  " << o.time << "  run '" << o.run_name << "'"
        << (o.run_id == shown_run_id ? " (this run)" : "") << ", " << o.phase;
    if (o.step) out << " at step " << *o.step;
    out << ": " << o.kind << " out of memory";
    if (o.bytes_requested) out << ", tried to allocate " << format_bytes_human(*o.bytes_requested);
    out << ", " << format_bytes_human(o.in_use) << " in use of " << format_bytes_human(o.total);
    if (o.injected) out << " [injected by LOOM_FAULTS: never used for reuse]";
    out << "\n      plan: "
        << (o.plan.plan ? guard::describe(*o.plan.plan) : "(unreadable: " + o.plan.error + ")")
        << "\n";
    if (!o.message.empty()) out << indented(o.message, "      message: ");
}

int run_show(const std::vector<std::string>& args) {
    cxxopts::Options options = show_options();
    const cxxopts::ParseResult parsed = parse_options(options, "stable show", args);
    refuse_extra_arguments("stable show", parsed);
    const std::int64_t id = parse_id("stable show", parsed);
    const fs::path file = store_file("stable show", parsed);
    std::optional<store::StableStore> s = open_existing(file);
    const store::StableRow r = require_row(s, id, file);

    std::ostream& out = std::cout;
    out << "stable plan #" << r.id << " in " << file.string() << "\n"
        << "recorded:   " << r.time << " by loom " << r.loom_version << "\n"
        << "run:        '" << r.run_name << "' (run #" << r.run_id << ", " << r.run_status
        << "), process " << r.process_index << " of its job, in " << r.run_folder << "\n"
        << "key:        " << key_text(r.key) << "\n"
        << "stable at:  step " << r.step << ", after " << r.steps_on_plan
        << " steps on this plan at " << std::fixed << std::setprecision(2) << r.steps_per_second
        << " steps/s\n"
        << "peak:       " << format_bytes_human(r.peak) << " of "
        << format_bytes_human(r.key.total_memory) << "\n"
        << "plan:       " << plan_summary(r) << "\n";
    if (!r.plan.plan) out << "            (" << r.plan.error << ")\n";
    out << "\nplan.yaml:\n" << indented(without_comment_header(r.plan.yaml), "  ");

    const std::vector<store::OomRow> ooms = s->ooms_for_key(r.key);
    out << "\nout-of-memory errors recorded for this key: " << ooms.size() << "\n";
    for (const store::OomRow& o : ooms) print_oom(out, o, r.run_id);
    out << "\n`loom stable export " << r.id << " -o job.yaml` writes the job with this plan\n";
    return to_int(ExitCode::kOk);
}

// ---- loom stable export

cxxopts::Options export_options() {
    cxxopts::Options options(
        "loom stable export",
        "Write the job of the run that recorded a stable plan, with that plan written into it "
        "(gradient checkpointing, batch and accumulation, frames, low_vram, sampling and loom's "
        "oom keys), as a job file that `loom config check` validates and `loom train` trains. "
        "Only that run's process is kept. Without --name the job keeps the run's name, so "
        "training it resumes the old run folder.");
    add_id_option(options);
    add_store_option(options);
    options.add_options()("o,output", "Write the job to FILE atomically (default: stdout)",
                          cxxopts::value<std::string>(), "FILE")(
        "name",
        "Give the job and its process this name, so training it starts a new run folder "
        "(default: the run's own name)",
        cxxopts::value<std::string>(), "NAME");
    return options;
}

int run_export(const std::vector<std::string>& args) {
    cxxopts::Options options = export_options();
    const cxxopts::ParseResult parsed = parse_options(options, "stable export", args);
    refuse_extra_arguments("stable export", parsed);
    const std::int64_t id = parse_id("stable export", parsed);
    const fs::path file = store_file("stable export", parsed);
    std::optional<store::StableStore> s = open_existing(file);
    const store::StableRow r = require_row(s, id, file);
    if (!r.plan.plan) {
        throw FormatError(file.string(), "stable plan #" + std::to_string(id) +
                                             " cannot be exported by this loom: " + r.plan.error);
    }

    // The job as the run read it (every default resolved), so the export trains the same thing.
    const std::string source =
        file.string() + " run #" + std::to_string(r.run_id) + " (the job of '" + r.run_name + "')";
    const config::LoadedJob stored = config::load_job_text(r.job_yaml, source);
    for (const config::Diagnostic& d : stored.warnings) std::cerr << d.to_string() << "\n";
    const std::size_t processes = stored.job.config.process.size();
    if (r.process_index >= processes) {
        throw FormatError(file.string(), "run #" + std::to_string(r.run_id) + " names process " +
                                             std::to_string(r.process_index) + " but its job has " +
                                             std::to_string(processes) +
                                             "; the store is inconsistent");
    }
    config::Job job = guard::job_with_plan(stored.job, r.process_index, *r.plan.plan);
    // One run, one process: the other processes of the job were not part of what proved stable.
    job.config.process = {job.config.process[r.process_index]};
    const bool renamed = parsed.count("name") > 0;
    if (renamed) {
        const std::string name = parsed["name"].as<std::string>();
        if (name.empty()) throw UsageError("loom stable export: --name needs a name");
        job.config.name = name;
        job.config.process[0].name = name;
    }

    std::ostringstream text;
    text << "# exported by loom stable export " << id << " from " << file.string()
         << ": the job of run " << r.run_name << " with its stable plan ("
         << guard::describe(*r.plan.plan) << ")\n"
         << "# stable at step " << r.step << " on " << r.key.device_name << " ("
         << format_bytes_human(r.key.total_memory) << "), recorded " << r.time;
    if (processes > 1) text << "; process " << r.process_index << " of " << processes;
    text << "\n" << config::emit_job_yaml(job);

    // The file must load as it is written: a job loom cannot read back is worse than none.
    try {
        config::load_job_text(text.str(), "the exported job");
    } catch (const Error& e) {
        throw Error(std::string("loom stable export: the exported job does not load back (") +
                    e.what() +
                    "); this is a bug in loom, please report it with the output of "
                    "`loom stable show " +
                    std::to_string(id) + "`");
    }

    if (!parsed.count("output")) {
        std::cout << text.str();
    } else {
        const fs::path output = parsed["output"].as<std::string>();
        write_file_atomic(output, text.str());
        std::cerr << "wrote " << output.string() << ": job '" << job.config.name
                  << "' with stable plan #" << id << "\n";
    }
    if (!renamed) {
        std::cerr << "note: training it resumes the run folder of '" << r.run_name << "' ("
                  << r.run_folder << ") when that has checkpoints; --name NEW starts a new run\n";
    }
    return to_int(ExitCode::kOk);
}

// ---- loom stable forget

cxxopts::Options forget_options() {
    cxxopts::Options options("loom stable forget",
                             "Forget a stable plan: list, show and export no longer see it, and "
                             "later runs with its key no longer start from it (an older stable "
                             "plan of the key, if any, takes its place). Its ID is not reused.");
    add_id_option(options);
    add_store_option(options);
    return options;
}

int run_forget(const std::vector<std::string>& args) {
    cxxopts::Options options = forget_options();
    const cxxopts::ParseResult parsed = parse_options(options, "stable forget", args);
    refuse_extra_arguments("stable forget", parsed);
    const std::int64_t id = parse_id("stable forget", parsed);
    const fs::path file = store_file("stable forget", parsed);
    std::optional<store::StableStore> s = open_existing(file);
    const store::StableRow r = require_row(s, id, file);
    // Another process may forget it between find and forget; the answer is the same then.
    if (!s->forget(id)) throw no_such_plan(id, file, true);
    std::cout << "forgot stable plan #" << id << " of run '" << r.run_name << "' ("
              << plan_summary(r) << "); later runs with its key no longer start from it\n";
    return to_int(ExitCode::kOk);
}

}  // namespace

Command make_stable_list_command() {
    return {"stable list", "List the plans recorded as stable, newest first",
            [] { return list_options().help(); }, run_list};
}

Command make_stable_show_command() {
    return {"stable show", "Print one stable plan, its run and the OOMs of its key",
            [] { return show_options().help(); }, run_show};
}

Command make_stable_export_command() {
    return {"stable export", "Write a stable plan's run as a job file with the plan in it",
            [] { return export_options().help(); }, run_export};
}

Command make_stable_forget_command() {
    return {"stable forget", "Forget a stable plan so later runs no longer start from it",
            [] { return forget_options().help(); }, run_forget};
}

}  // namespace loom::cli
