#include "store_test_util.h"

#include <SQLiteCpp/Database.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "loom/core/logging.h"

namespace loom::test {

guard::PlanKey make_key(const std::string& device, std::uint64_t total_memory) {
    guard::PlanKey key;
    key.arch = "sd1";
    key.model_fingerprint = "a1b2c3d4e5f60718";
    key.device_name = device;
    key.total_memory = total_memory;
    key.dtype = "bfloat16";
    key.rank = 16;
    key.max_resolution = 768;
    key.frames = 1;
    return key;
}

guard::Plan heavy_plan() {
    guard::Plan p;
    p.gradient_checkpointing = false;
    p.batch_size = 4;
    p.gradient_accumulation = 1;
    p.sample.width = 1024;
    p.sample.height = 1024;
    return p;
}

guard::Plan light_plan() {
    guard::Plan p;
    p.gradient_checkpointing = true;
    p.batch_size = 1;
    p.gradient_accumulation = 4;
    p.max_bucket_pixels = 512 * 512;
    p.low_vram = 1;
    p.sample.width = 512;
    p.sample.height = 512;
    p.sample.batch_prompts = false;
    p.host.memory_caches = false;
    p.host.threads = 2;
    return p;
}

guard::Plan middle_plan() {
    guard::Plan p = heavy_plan();
    p.gradient_checkpointing = true;
    p.batch_size = 2;
    p.gradient_accumulation = 2;
    return p;
}

guard::RunFacts make_run(const std::string& name, const guard::PlanKey& key) {
    guard::RunFacts run;
    run.key = key;
    run.name = name;
    run.run_folder = "/runs/" + name;
    run.job_yaml = "job: extension\nconfig:\n  name: " + name + "\n";
    run.process_index = 1;
    run.plan = heavy_plan();
    return run;
}

guard::OomFacts make_oom(const guard::Plan& plan, bool injected) {
    guard::OomFacts oom;
    oom.phase = "train_step";
    oom.step = 12;
    oom.kind = "device";
    oom.bytes_requested = 1ull << 30;
    oom.in_use = 79ull << 30;
    oom.total = 80ull << 30;
    oom.plan = plan;
    oom.injected = injected;
    oom.message = "CUDA out of memory. Tried to allocate 1.00 GiB";
    return oom;
}

guard::StableFacts make_stable(const guard::Plan& plan, std::int64_t step) {
    guard::StableFacts stable;
    stable.step = step;
    stable.steps_on_plan = 50;
    stable.peak = 71ull << 30;
    stable.steps_per_second = 2.5;
    stable.plan = plan;
    return stable;
}

std::string read_bytes(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + file.string());
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
}

void write_bytes(const std::filesystem::path& file, const std::string& bytes) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << bytes;
    if (!out) throw std::runtime_error("cannot write " + file.string());
}

std::int64_t count_rows(const std::filesystem::path& db, const std::string& table) {
    SQLite::Database connection(db.string(), SQLite::OPEN_READONLY);
    return connection.execAndGet("SELECT count(*) FROM " + table).getInt64();
}

std::string query_text(const std::filesystem::path& db, const std::string& sql) {
    SQLite::Database connection(db.string(), SQLite::OPEN_READONLY);
    return connection.execAndGet(sql).getString();
}

LogCapture::LogCapture(const std::filesystem::path& folder) : file_(folder / "capture.log") {
    if (!add_log_file(file_)) throw std::runtime_error("cannot capture the log");
}

LogCapture::~LogCapture() {
    close_log_files();
}

std::string LogCapture::text() const {
    return read_bytes(file_);
}

int count_of(const std::string& haystack, const std::string& needle) {
    int n = 0;
    for (std::size_t at = haystack.find(needle); at != std::string::npos;
         at = haystack.find(needle, at + needle.size())) {
        ++n;
    }
    return n;
}

}  // namespace loom::test
