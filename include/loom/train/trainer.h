#pragma once

// The training loop for one `config.process[]` entry: load the model, scan and bucket the data,
// attach the LoRA, then step, save, sample and checkpoint into the run folder. A run folder that
// already holds a complete checkpoint is resumed from its newest one (unless `fresh`).
//
// Determinism: every random draw of a step is a function of (training_seed, step, slot) — the
// noise, the timestep, caption dropout/shuffling, the VAE's latent sample — and the data order
// is a function of (seed, epoch), so a resumed run continues exactly where the checkpoint was.

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "loom/config/job.h"

namespace loom {

namespace dist {
class ProcessGroup;
}
namespace guard {
class PlanStore;
}

struct TrainOverrides {
    std::optional<std::string> device;  // --device, over process.device
    std::optional<std::uint64_t> vram;  // --vram, over oom.vram_limit
    bool fresh = false;                 // ignore an existing run folder's checkpoints
    // Another trainer owns the run folder: wait for it (--wait) instead of stopping with
    // RunFolderBusyError (train/run_lock.h).
    bool wait_for_run_folder = false;
    // Stop (as if killed, without a final save) once this many steps ran in this invocation;
    // tests use it to interrupt a run at a known step.
    std::optional<std::int64_t> stop_after_steps;
    bool progress_line = true;  // one updating line on a terminal
    // Set (by a SIGINT/SIGTERM handler) to stop after the running step: a checkpoint is saved
    // and the run returns with `interrupted` set; rerunning the job resumes from there.
    const std::atomic<bool>* stop_requested = nullptr;
    // The stable-config store (loom/store): told of the run, its OOMs and stable plans, and
    // asked at the start for a known stable plan (oom.reuse_stable). nullptr: no store.
    guard::PlanStore* plan_store = nullptr;
    // Called with the run folder after every checkpoint is saved (the CLI refreshes report.html
    // there). What it throws is logged as a warning; it never stops the run.
    std::function<void(const std::filesystem::path& run_folder)> after_checkpoint;
    // A data-parallel run (several processes, DESIGN.md "several GPUs"): the group of ranks this
    // process is one of. Every rank trains its share of each global batch (the job's batch
    // times the ranks) and the same update; every attempt ends with the group's outcome and an
    // OOM anywhere with one decision for all; rank 0 alone writes the run folder and the store.
    // nullptr: this process trains alone.
    dist::ProcessGroup* group = nullptr;
};

struct TrainSummary {
    std::filesystem::path run_folder;
    std::filesystem::path final_lora;  // empty when stopped early
    // Every file of the final LoRA: final_lora alone, or an expert pair (Wan 2.2).
    std::vector<std::filesystem::path> final_loras;
    std::int64_t start_step = 0;  // the step this invocation started from
    std::int64_t end_step = 0;
    bool resumed = false;
    bool interrupted = false;                      // stopped by stop_requested after a checkpoint
    std::vector<double> losses;                    // per step of this invocation
    int ooms = 0;                                  // out-of-memory errors recovered from
    int plan_changes = 0;                          // ladder rungs taken
    std::string final_plan;                        // guard::describe of the plan the run ended on
    std::optional<std::int64_t> reused_stable_id;  // the store's stable plan the run started from
};

TrainSummary train_process(const config::Job& job, std::size_t process_index,
                           const TrainOverrides& overrides = {});

}  // namespace loom
