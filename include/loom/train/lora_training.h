#pragma once

// The trainable half of a run: the job's LoRA injected into the denoiser (the UNet, Flux's
// transformer), its optimizer (train.optimizer) and its state, the EMA
// averages and the learning-rate schedule — set up from the job, stepped, written to LoRA files
// and to checkpoints, and restored from them. The frozen base model is not here.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "loom/config/job.h"
#include "loom/io/safetensors.h"
#include "loom/lora/lora_network.h"
#include "loom/train/checkpoint_state.h"
#include "loom/train/ema.h"
#include "loom/train/lr_schedule.h"
#include "loom/train/optimizer.h"

namespace loom {

class Device;
class StepGraphs;

class LoRATraining {
  public:
    // Injects `process`'s network into `denoiser`, whose LoRA model (its family's blocks and
    // file prefix, lora/target_rules.h) picks the targets (initialised from `seed`, placed on
    // `device`,
    // loaded from network.pretrained_lora_path when set) and creates the optimizer, the
    // schedule and (train.ema_config.use_ema) the EMA.
    LoRATraining(const config::ProcessConfig& process, torch::nn::Module& denoiser,
                 const LoRAModel& model, const Device& device, std::uint64_t seed);

    LoRANetwork& network() { return *network_; }
    Optimizer& optimizer() { return *optimizer_; }
    const LrSchedule& schedule() const { return schedule_; }
    std::vector<at::Tensor> parameters() const { return network_->parameters(); }

    // The update after a step's micro-batches: clip (max_norm > 0), the optimizer at the schedule's
    // rate for 0-based step `step_index`, gradients back to undefined, the EMA follows.
    void step(std::int64_t step_index, double max_grad_norm);
    // The same update under perf.cuda_graphs, as the key "update" of `graphs` (captured with
    // the micro-batches; the gradients must be the accumulators the captures add into). Falls
    // back to step() where the device update does not apply.
    void step(std::int64_t step_index, double max_grad_norm, StepGraphs& graphs);

    // The LoRA file of `process` (save.format, save.dtype) holding the EMA weights when there is
    // an EMA, as ai-toolkit saves them. Atomic. Returns the files written: `file`, or for a
    // denoiser of experts one file per trained expert beside it (lora/lora_file_names.h).
    std::vector<std::filesystem::path> save_file(const std::filesystem::path& file,
                                                 const config::ProcessConfig& process,
                                                 SafetensorsMetadata metadata);

    // The LoRA, optimizer and EMA parts of a checkpoint at `step` (host copies).
    CheckpointState checkpoint(std::int64_t step) const;
    // Restores them; FormatError naming `source` when the checkpoint's network differs. A
    // checkpoint trained at another linear alpha (one saved before loom trained transformer
    // LoRAs at alpha = rank) goes on at its own, said once.
    void restore(const CheckpointState& state, const std::filesystem::path& source);

    // For its lifetime the EMA weights stand in for the live ones (saving and previews use
    // them) — swapped back also when an OOM unwinds through it. A no-op without an EMA.
    class EmaWeights {
      public:
        explicit EmaWeights(LoRATraining& training);
        ~EmaWeights();
        EmaWeights(const EmaWeights&) = delete;
        EmaWeights& operator=(const EmaWeights&) = delete;

      private:
        Ema* ema_;
        std::vector<at::Tensor> params_;
    };

  private:
    std::unique_ptr<LoRANetwork> network_;
    std::unique_ptr<Optimizer> optimizer_;
    std::unique_ptr<Ema> ema_;
    LrSchedule schedule_;
    double linear_alpha_ = 1.0;  // the Linear LoRAs' alpha as they train now
    int linear_rank_ = 1;
    std::optional<double> job_linear_alpha_;  // config::Choices::job_linear_alpha, effective
};

}  // namespace loom
