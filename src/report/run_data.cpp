#include "loom/report/run_data.h"

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace loom::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string text_of(const json& j, const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

double number_of(const json& j, const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

std::optional<std::int64_t> int_of(const json& j, const char* key) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_number()) return std::nullopt;
    return it->get<std::int64_t>();
}

std::string read_text(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) return {};
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// Every line of a JSON-lines file that parses to an object; the others are counted.
template <class F>
void for_each_object(const fs::path& file, std::size_t& skipped, F&& f) {
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
        if (line.empty()) continue;
        json j = json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object()) {
            ++skipped;
            continue;
        }
        f(j);
    }
}

// "2026-12-01T14:50:14.876Z" (the events' times) as Unix seconds; 0 when it is not one.
double unix_seconds(const std::string& iso) {
    std::tm tm{};
    int ms = 0;
    if (std::sscanf(iso.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon,
                    &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) < 6) {
        return 0.0;
    }
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return double(timegm(&tm)) + ms / 1000.0;
}

// Lines from before `since` (Unix seconds) belong to a run this folder held before --fresh.
void read_metrics(RunData& run, double since) {
    std::map<std::int64_t, MetricPoint>
        by_step;  // a resumed run trains some steps again: the last wins
    for_each_object(run.folder / "metrics.jsonl", run.skipped_lines, [&](const json& j) {
        const std::optional<std::int64_t> step = int_of(j, "step");
        if (!step) {
            ++run.skipped_lines;
            return;
        }
        MetricPoint m;
        m.step = *step;
        m.loss = number_of(j, "loss");
        m.lr = number_of(j, "lr");
        m.allocated = number_of(j, "allocated");
        m.peak_allocated = number_of(j, "peak_allocated");
        m.step_seconds = number_of(j, "step_seconds");
        m.time = number_of(j, "time");
        if (m.time + 1.0 < since) return;
        by_step[m.step] = m;
    });
    for (const auto& [step, m] : by_step) run.metrics.push_back(m);
}

// From the last start with --fresh (what came before is an earlier run in the same folder);
// returns that start's time in Unix seconds (0: every line counts).
double read_events(RunData& run) {
    std::vector<json> events;
    for_each_object(run.folder / "events.jsonl", run.skipped_lines,
                    [&](const json& j) { events.push_back(j); });
    std::size_t first = 0;
    for (std::size_t i = 0; i < events.size(); ++i) {
        const auto fresh = events[i].find("fresh");
        if (text_of(events[i], "event") == "start" && fresh != events[i].end() &&
            fresh->is_boolean() && fresh->get<bool>()) {
            first = i;
        }
    }
    const double since =
        first < events.size() && first > 0 ? unix_seconds(text_of(events[first], "time")) : 0.0;
    bool final_save = false;
    bool interrupted = false;
    for (std::size_t i = first; i < events.size(); ++i) {
        const json& j = events[i];
        const std::string event = text_of(j, "event");
        const std::string time = text_of(j, "time");
        if (run.started.empty()) run.started = time;
        if (!time.empty()) run.last_event = time;
        if (event == "start") {
            run.device = text_of(j, "device");
            run.total = number_of(j, "total");
            run.start_plan = text_of(j, "plan");
            final_save = false;  // a resumed run starts again
            interrupted = false;
        } else if (event == "oom") {
            run.ooms.push_back({text_of(j, "phase"), int_of(j, "step"), text_of(j, "kind"),
                                text_of(j, "message"), number_of(j, "peak"), time});
        } else if (event == "change") {
            PlanChange c{text_of(j, "phase"),
                         int_of(j, "step"),
                         text_of(j, "rule"),
                         text_of(j, "reason"),
                         {},
                         text_of(j, "plan"),
                         time};
            const auto moves = j.find("changes");
            if (moves != j.end() && moves->is_array()) {
                for (const json& m : *moves) {
                    if (m.is_object()) {
                        c.moves.push_back(
                            {text_of(m, "knob"), text_of(m, "from"), text_of(m, "to")});
                    }
                }
            }
            run.changes.push_back(std::move(c));
        } else if (event == "measure") {
            ++run.measurements;
        } else if (event == "save") {
            const auto f = j.find("final");
            final_save = final_save || (f != j.end() && f->is_boolean() && f->get<bool>());
        } else if (event == "interrupted") {
            interrupted = true;
        } else if (event == "restart") {
            ++run.restarts;
        } else if (event == "supervisor_gave_up") {
            run.status = "failed";
            run.end_reason = "the training process died (" + text_of(j, "cause") + ") " +
                             std::to_string(int_of(j, "deaths").value_or(0)) +
                             " times and the supervisor stopped restarting it";
        } else if (event == "does_not_fit" || event == "worker_state") {
            run.status = event == "does_not_fit" ? "does not fit" : "worker state";
            run.end_reason = text_of(j, "reason");
        }
    }
    if (run.status.empty()) {
        run.status = final_save ? "completed" : interrupted ? "interrupted" : "running";
    }
    return since;
}

// The job as the run folder keeps it (config.yaml): the process whose name is the folder's, or
// the first one.
void read_config(RunData& run) {
    YAML::Node root;
    try {
        root = YAML::LoadFile((run.folder / "config.yaml").string());
    } catch (const std::exception&) {
        return;
    }
    const YAML::Node processes = root["config"] ? root["config"]["process"] : YAML::Node();
    if (!processes || !processes.IsSequence() || processes.size() == 0) return;
    YAML::Node process = processes[0];
    for (const YAML::Node& p : processes) {
        if (p["name"] && p["name"].IsScalar() && p["name"].as<std::string>() == run.name)
            process = p;
    }
    try {
        if (process["model"] && process["model"]["name_or_path"]) {
            run.model = process["model"]["name_or_path"].as<std::string>();
        }
        if (process["model"] && process["model"]["arch"]) {
            run.arch = process["model"]["arch"].as<std::string>();
        }
        if (process["train"] && process["train"]["steps"]) {
            run.steps_asked = process["train"]["steps"].as<std::int64_t>();
        }
    } catch (const YAML::Exception&) {
        // A value of an unexpected type: left unknown.
    }
}

// "<Unix milliseconds>__<step>_<i>.png": only the current run's (see read_events).
void read_samples(RunData& run, double since) {
    std::error_code ec;
    const fs::path dir = run.folder / "samples";
    if (!fs::is_directory(dir, ec)) return;
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        if (e.path().extension() != ".png") continue;
        const std::size_t sep = name.find("__");
        if (sep == std::string::npos || name.size() < sep + 2 + 9) continue;
        const std::string digits = name.substr(sep + 2, 9);
        if (!std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
        const std::string written = name.substr(0, sep);
        if (since > 0 && std::all_of(written.begin(), written.end(), ::isdigit) &&
            !written.empty() && std::stod(written) / 1000.0 + 1.0 < since) {
            continue;
        }
        SampleImage s;
        s.step = std::stoll(digits);
        s.file = "samples/" + name;
        s.grid = name.find("_grid.png") != std::string::npos;
        run.samples.push_back(std::move(s));
    }
    std::sort(run.samples.begin(), run.samples.end(),
              [](const SampleImage& a, const SampleImage& b) {
                  return a.step != b.step ? a.step < b.step : a.file < b.file;
              });
}

}  // namespace

RunData read_run(const fs::path& folder) {
    RunData run;
    run.folder = folder;
    run.name = fs::absolute(folder).lexically_normal().filename().string();
    if (run.name.empty()) run.name = fs::absolute(folder).parent_path().filename().string();
    read_config(run);
    const double since = read_events(run);
    read_metrics(run, since);
    read_samples(run, since);
    run.final_plan_yaml = read_text(folder / "plan.yaml");
    run.stable_yaml = read_text(folder / "stable.yaml");
    return run;
}

std::int64_t steps_lost(const RunData& run) {
    std::set<std::int64_t> seen;
    std::int64_t last = 0;
    for (const MetricPoint& m : run.metrics) {
        seen.insert(m.step);
        last = std::max(last, m.step);
    }
    std::int64_t lost = 0;
    for (std::int64_t s = 1; s <= last; ++s) lost += seen.count(s) == 0;
    return lost;
}

}  // namespace loom::report
