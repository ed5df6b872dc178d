#pragma once

// The report's "history of this job's key": what the stable-config store recorded for every run
// with the same key as the run in this folder — their OOMs and ends, and the stable plans.

#include <filesystem>
#include <optional>

#include "loom/report/html_report.h"
#include "loom/store/stable_store.h"

namespace loom::report {

StoreHistory read_history(store::StableStore& store, const std::filesystem::path& run_folder);

// The same from the store file, which is never created here: nullopt when it does not exist.
// Throws store::StoreError when it cannot be read.
std::optional<StoreHistory> read_history_file(const std::filesystem::path& store_file,
                                              const std::filesystem::path& run_folder);

}  // namespace loom::report
