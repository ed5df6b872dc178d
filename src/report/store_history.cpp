#include "loom/report/store_history.h"

#include <algorithm>
#include <set>

#include "loom/guard/plan.h"
#include "loom/guard/plan_store.h"

namespace loom::report {

namespace fs = std::filesystem;

StoreHistory read_history(store::StableStore& store, const fs::path& run_folder) {
    StoreHistory h;
    h.store_file = store.file().string();
    const std::string folder = fs::absolute(run_folder).lexically_normal().string();
    std::vector<store::RunRow> runs = store.runs_with_key_of(folder);
    if (runs.empty()) {
        // The trainer records fs::absolute(run root) as it was given, which may hold "./".
        runs = store.runs_with_key_of(fs::absolute(run_folder).string());
    }
    if (runs.empty()) return h;
    h.key = guard::describe(runs.front().key);
    std::set<std::int64_t> ids;
    for (const store::RunRow& r : runs) {
        HistoryRun run;
        run.name = r.name;
        run.folder = r.run_folder;
        run.status = r.status;
        run.started = r.started;
        run.steps = r.steps;
        run.ooms = r.ooms;
        if (r.end_plan && r.end_plan->plan) run.end_plan = guard::describe(*r.end_plan->plan);
        run.this_run = fs::path(r.run_folder).lexically_normal() == fs::path(folder);
        h.runs.push_back(std::move(run));
        ids.insert(r.id);
    }
    for (const store::StableRow& s : store.list()) {
        if (ids.count(s.run_id) == 0) continue;
        h.stables.push_back({s.run_name, s.time,
                             s.plan.plan ? guard::describe(*s.plan.plan) : s.plan.yaml,
                             s.steps_per_second, s.peak});
    }
    return h;
}

std::optional<StoreHistory> read_history_file(const fs::path& store_file,
                                              const fs::path& run_folder) {
    std::error_code ec;
    if (!fs::exists(store_file, ec)) return std::nullopt;
    store::StableStore store = store::StableStore::open(store_file);
    return read_history(store, run_folder);
}

}  // namespace loom::report
