#pragma once

// A training checkpoint in the run folder's state/<9-digit step>/: the LoRA weights (float32),
// the optimizer state, the EMA averages, the torch CPU RNG state, the data cursor and the memory
// plan. Each file is written atomically and a COMPLETE marker is written last, so a crash during a
// save leaves the previous checkpoint as the resume point.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "loom/train/optimizer.h"

namespace loom {

class RunFolder;

struct CheckpointState {
    std::int64_t step = 0;         // steps completed
    std::vector<at::Tensor> lora;  // network parameters, in LoRANetwork::parameters() order
    OptimizerState optimizer;      // its lists hold one tensor per LoRA tensor
    std::vector<at::Tensor> ema;   // empty without EMA
    at::Tensor rng_cpu;            // torch's default CPU generator state (rank 0's)
    // A data-parallel run: how many ranks saved it, ranks 1.. own generator states, and the
    // global batch its data cursor counts in (the job's batch times the ranks). Older and
    // single-process checkpoints: 1 rank, no other states, global_batch 0 (the job's batch).
    int world_size = 1;
    std::vector<at::Tensor> rng_ranks;
    int global_batch = 0;
    std::string data_cursor;  // data::cursor_to_json
    std::string plan_yaml;    // the guard's plan when saved (plan.yaml); may be empty
    // The alpha the Linear LoRAs trained at; absent in checkpoints from before it was recorded.
    std::optional<double> linear_alpha;
};

void save_checkpoint(const std::filesystem::path& dir, const CheckpointState& state);
// Throws FormatError naming the file when something is missing or malformed.
CheckpointState load_checkpoint(const std::filesystem::path& dir);

// The newest complete checkpoint of `run` that loads; nullopt when there is none. One that claims
// to be complete but does not load (a truncated file, a disk that filled mid-save) is passed
// over — `passed_over(step, error)` is told — for the one before it; nothing is deleted. Throws
// FormatError when checkpoints exist but none loads (train with --fresh to start over).
std::optional<CheckpointState> load_newest_checkpoint(
    const RunFolder& run,
    const std::function<void(std::int64_t step, const std::string& error)>& passed_over);

}  // namespace loom
