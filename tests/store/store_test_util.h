#pragma once

// Helpers shared by the store tests: keys, runs and plans that differ in every way a round trip
// could lose, raw file and SQLite access, and a log capture for the recorder's warnings.

#include <cstdint>
#include <filesystem>
#include <string>

#include "loom/guard/plan.h"
#include "loom/guard/plan_store.h"

namespace loom::test {

// sd1 on "NVIDIA H200" with 80 GiB; `device` and `total_memory` make other keys.
guard::PlanKey make_key(const std::string& device = "NVIDIA H200",
                        std::uint64_t total_memory = 80ull << 30);

// What a job asks for: no checkpointing, batch 4 x 1, every bucket, 1024 px batched samples.
guard::Plan heavy_plan();
// Where the ladder ends up: checkpointing, batch 1 x 4, buckets <= 512x512, low_vram 1, 512 px
// samples one prompt at a time, caches on disk, 2 CPU threads.
guard::Plan light_plan();
// Between the two: checkpointing, batch 2 x 2.
guard::Plan middle_plan();

guard::RunFacts make_run(const std::string& name, const guard::PlanKey& key);
guard::OomFacts make_oom(const guard::Plan& plan, bool injected = false);
guard::StableFacts make_stable(const guard::Plan& plan, std::int64_t step = 120);

std::string read_bytes(const std::filesystem::path& file);
void write_bytes(const std::filesystem::path& file, const std::string& bytes);

// SELECT count(*) FROM `table` through a connection of its own.
std::int64_t count_rows(const std::filesystem::path& db, const std::string& table);
// The first column of the first row of `sql`, as text.
std::string query_text(const std::filesystem::path& db, const std::string& sql);

// Captures what every logger writes while it lives (a log file in `folder`).
class LogCapture {
  public:
    explicit LogCapture(const std::filesystem::path& folder);
    ~LogCapture();
    LogCapture(const LogCapture&) = delete;
    LogCapture& operator=(const LogCapture&) = delete;
    std::string text() const;

  private:
    std::filesystem::path file_;
};

// How often `needle` occurs in `haystack`.
int count_of(const std::string& haystack, const std::string& needle);

}  // namespace loom::test
