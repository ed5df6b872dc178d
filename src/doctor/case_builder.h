#pragma once

// The guide's table (reference/oom-guide.txt §4, §5): the first OOM the log scanner found, the
// settings the log printed and what loom already did decide the case, its most likely cause,
// the first change and the changes after it (advice.h: the guard's rung table, in the tool's
// words). Internal to the doctor layer.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "advice.h"
#include "log_scanner.h"
#include "loom/device/phase.h"
#include "loom/doctor/diagnosis.h"
#include "loom/guard/ladder_policy.h"

namespace loom::doctor::detail {

// "model load", "training step", ...: a phase as the diagnosis names it.
const char* phase_label(Phase p);

// Phases that run the training step (the probe runs one; a save follows one).
bool is_training_phase(Phase p);

// Fills the case fields of a Diagnosis (log_case, title, moment, cause, reason, first_change,
// further_changes). The diagnosis's tool and loom_outcome must be set before build().
class CaseBuilder {
  public:
    CaseBuilder(Diagnosis& d, const Settings& st, const std::vector<Sighting>& sightings,
                std::int64_t successes_after_oom, bool aborted)
        : d_(d),
          st_(st),
          sightings_(sightings),
          successes_after_oom_(successes_after_oom),
          aborted_(aborted) {}

    // loom's answer to the first OOM, when the log has it: its ladder sees which bucket failed.
    void set_loom_answer(const LoomChange* change) { loom_answer_ = change; }

    void build();

    // The rungs the first change takes (none for worker state): loom already made it when one of
    // their knobs is among loom's changes.
    const std::vector<const guard::RungSpec*>& first_change_rungs() const { return first_rungs_; }

  private:
    std::optional<std::string> worker_state_reason(const Sighting& first) const;
    void before_step_1(const Sighting& first);
    void training(const Sighting& first);
    void early_steps(const Sighting& first);
    void sampling_only(const Sighting& first);
    void sometimes(const Sighting& first);
    void video_frames(const Sighting& first);
    void worker_state(const std::string& reason);
    void build_device_case(const Sighting& first);
    void host_ram(const Sighting& first);
    void memory_held_elsewhere(const Sighting& first);
    std::vector<Advice> ladder(guard::LadderBranch branch) const;
    std::string later_ooms() const;
    const std::string& advice(const char* rule) const;

    Diagnosis& d_;
    const Settings& st_;
    const std::vector<Sighting>& sightings_;
    std::int64_t successes_after_oom_;
    bool aborted_;
    const LoomChange* loom_answer_ = nullptr;
    std::vector<const guard::RungSpec*> first_rungs_;
};

}  // namespace loom::doctor::detail
