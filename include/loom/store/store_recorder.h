#pragma once

// The stable store as a training run uses it: guard::PlanStore over a StableStore file. A run
// must never stop because of the store (DESIGN.md "Stability and reuse"; the run folder's
// stable.yaml and plan.yaml are written regardless), so no method of this class throws:
//
// - The file is opened on first use. When that fails (a damaged file, a newer schema, a folder
//   that cannot be written), one warning names the file and the cause, and the recorder stays
//   off for the rest of the process: known_plans answers "nothing known", records are dropped.
// - When one write fails (a lock held past the busy timeout, a full disk), a warning names the
//   record that was lost and the recorder stays on for the next one. A run start that failed is
//   retried before the run's next record, so its later records are not lost with it.
//
// Not thread-safe: one recorder per training process, called from the training thread.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "loom/guard/plan_store.h"
#include "loom/store/stable_store.h"

namespace loom::store {

class StoreRecorder final : public guard::PlanStore {
  public:
    explicit StoreRecorder(std::filesystem::path file, StoreOptions options = {});
    ~StoreRecorder() override;

    guard::KnownPlans known_plans(const guard::PlanKey& key) override;
    void run_started(const guard::RunFacts& run) override;
    void oom(const guard::OomFacts& oom) override;
    void stable(const guard::StableFacts& stable) override;
    void run_finished(const guard::RunEnd& end) override;

    const std::filesystem::path& file() const { return file_; }
    // The ID of the latest stable plan this recorder stored ("recorded as #12 in FILE").
    std::optional<std::int64_t> last_stable_id() const { return last_stable_id_; }
    // False once opening the file failed (after one warning).
    bool enabled() const { return !disabled_; }

  private:
    // The open store, opening it on first use; nullptr when it cannot be opened.
    StableStore* store() noexcept;
    // The current run's ID, recording its start first when an earlier attempt failed; nullopt
    // (after a warning that `record` is lost) when the run is still not recorded.
    std::optional<std::int64_t> run_id(StableStore& store, const std::string& record);
    void warn_disabled(const std::string& cause) const noexcept;
    void warn_lost(const std::string& record, const char* cause) const noexcept;

    std::filesystem::path file_;
    StoreOptions options_;
    std::optional<StableStore> store_;
    bool disabled_ = false;
    std::optional<guard::RunFacts> run_;  // the latest run_started
    std::optional<std::int64_t> run_id_;  // its row, once recorded
    std::optional<std::int64_t> last_stable_id_;
};

}  // namespace loom::store
