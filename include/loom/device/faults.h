#pragma once

// Fault injection for tests and demos: LOOM_FAULTS / --faults, rules separated by ';':
//
//   oom:phase=P[:step=N][:times=K]  OOM at the next device allocation inside phase P (at
//                                    training step N when given), K times (default 1)
//   oom:phase=train_step[:step=N][:times=K]:during=update
//                                    the same, only among the allocations of the optimizer
//                                    update (UpdateScope): after the step's backward passes
//                                    and, with several ranks, after they agreed
//   oom:alloc=N                      the N-th device allocation fails (1-based, non-empty ones)
//   dirty                            the device reports almost nothing free before anything is
//                                    allocated, and every allocation fails
//   flaky:p=X:seed=S                 each device allocation fails with probability X
//   host_oom:phase=P[:step=N][:times=K]  the next host allocation inside phase P fails as the
//                                    CPU allocator fails when RAM runs out (sim device)
//   kill:phase=P[:step=N]            the process kills itself with SIGKILL when phase P begins
//                                    (at step N when given): the host OOM killer, for the
//                                    supervisor's tests
//
// The guard marks the current phase and step (PhaseScope); the simulated device's allocator asks
// the injector before each device allocation. Thread-safe.

#include <cstdint>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "loom/device/phase.h"

namespace loom {

struct FaultRule {
    enum class Kind {
        kOomInPhase,
        kOomAtAllocation,
        kDirty,
        kFlaky,
        kHostOomInPhase,
        kKillInPhase
    };
    Kind kind = Kind::kOomInPhase;
    Phase phase = Phase::kNone;        // kOomInPhase, kHostOomInPhase, kKillInPhase
    std::optional<std::int64_t> step;  // kOomInPhase: only at this training step
    int times = 1;                     // kOomInPhase: how many allocations fail
    bool during_update = false;        // kOomInPhase: only inside an UpdateScope
    std::uint64_t allocation = 0;      // kOomAtAllocation
    double probability = 0.0;          // kFlaky
    std::uint64_t seed = 0;            // kFlaky
    std::string text;                  // the rule as written, for messages
};

// Parses a LOOM_FAULTS string; throws loom::UsageError naming the bad rule and the grammar.
std::vector<FaultRule> parse_faults(std::string_view text);

class FaultInjector {
  public:
    // Replaces the rules and resets every counter.
    void configure(std::vector<FaultRule> rules);
    void clear() { configure({}); }
    bool active() const;

    // The guard's current phase and training step.
    void set_phase(Phase phase, std::optional<std::int64_t> step = std::nullopt);
    // Whether the optimizer update runs (UpdateScope).
    void set_in_update(bool in_update);
    Phase phase() const;
    std::optional<std::int64_t> step() const;

    // Called for each device allocation of `bytes` (> 0). Returns the rule text when this
    // allocation must fail, nullopt otherwise. Counts the allocation either way.
    std::optional<std::string> on_device_allocation(std::uint64_t bytes);

    // Called for each host allocation of `bytes` (> 0) on the sim device: the rule text when it
    // must fail as the CPU allocator fails, nullopt otherwise.
    std::optional<std::string> on_host_allocation(std::uint64_t bytes);

    // True when a `kill` rule matches the phase (and step) that begins now.
    bool kill_at_phase_start(Phase phase, std::optional<std::int64_t> step);

    // True when a `dirty` rule is active: the device must report (almost) nothing free.
    bool dirty() const;

    // Device allocations seen since configure().
    std::uint64_t allocations_seen() const;
    // Allocations (device or host) a rule has failed since configure(): an OOM that happened
    // while this count rose was injected, not the device running out.
    std::uint64_t failures_injected() const;

  private:
    mutable std::mutex mutex_;
    std::vector<FaultRule> rules_;
    std::vector<int> fired_;  // per rule
    Phase phase_ = Phase::kNone;
    std::optional<std::int64_t> step_;
    bool in_update_ = false;
    std::uint64_t allocations_ = 0;
    std::uint64_t failures_injected_ = 0;
    std::vector<std::mt19937_64> rngs_;  // per rule (flaky)
};

// The process-wide injector (no rules until configured).
FaultInjector& fault_injector();

// Configures the process-wide injector from --faults when given, else from LOOM_FAULTS; called
// at start-up so a malformed rule stops the program before any work (UsageError).
void configure_faults(const std::optional<std::string>& flag);

// Marks a phase (and step) for its lifetime, restoring the previous one after.
class PhaseScope {
  public:
    explicit PhaseScope(Phase phase, std::optional<std::int64_t> step = std::nullopt);
    ~PhaseScope();
    PhaseScope(const PhaseScope&) = delete;
    PhaseScope& operator=(const PhaseScope&) = delete;

  private:
    Phase previous_;
    std::optional<std::int64_t> previous_step_;
};

// Marks the optimizer update for its lifetime (the `during=update` rules).
class UpdateScope {
  public:
    UpdateScope();
    ~UpdateScope();
    UpdateScope(const UpdateScope&) = delete;
    UpdateScope& operator=(const UpdateScope&) = delete;
};

}  // namespace loom
