#pragma once

// One training step of the LoRA: the step's items (drawn once from the data order), cut into
// micro-batches of the plan's batch size, each one forward and backward with its loss weighted
// by its share of the step, then one optimizer update. The update runs only after every
// micro-batch succeeded, so an OOM never leaves a half-applied step; a retry starts again from
// the same items and the same RNG state (DESIGN.md "Retry semantics").

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/data/data_order.h"
#include "loom/data/micro_batch.h"
#include "loom/data/tensor_cache.h"
#include "loom/guard/plan.h"
#include "loom/train/checkpoint_state.h"
#include "loom/train/step_times.h"
#include "loom/train/training_data.h"

namespace loom {

class Device;
class DiffusionObjective;
class GraphedForwardBackward;
class LoRATraining;
class StepGraphs;
class ModelFamily;
namespace dist {
class ProcessGroup;
}
namespace guard {
class Guard;
}

// The work of one training step, drawn once: the batches the data order handed out for it and
// the torch RNG state before it. A retry after an OOM trains on exactly these, however the plan
// now cuts them into micro-batches.
struct StepWork {
    std::int64_t index = 0;  // 0-based; the step's number is index + 1
    std::vector<data::Batch> batches;
    at::Tensor rng_state;
};

class TrainingStep {
  public:
    // What a step works with; every reference must outlive the TrainingStep.
    struct Parts {
        const Device& device;
        ModelFamily& model;
        TrainingData& data;
        LoRATraining& lora;
        const DiffusionObjective& objective;
        guard::Guard& guard;
        TrainingData::LatentEncode encode_latent;
        TrainingData::TextEncode encode_text;
        // perf.cuda_graphs: micro-batches run on static buffers through these (captured per
        // shape on CUDA, eagerly elsewhere); null: the plain path.
        StepGraphs* graphs = nullptr;
        // A data-parallel run: this rank's part of every batch, and the group its gradients
        // are summed over (null: one process trains every item).
        data::Shard shard{};
        dist::ProcessGroup* group = nullptr;
    };
    TrainingStep(Parts parts, std::uint64_t seed, int gradient_accumulation, double max_grad_norm);
    ~TrainingStep();

    // The next step's batches (train.gradient_accumulation of them) and the RNG state.
    StepWork draw(std::int64_t index);
    // Trains `work` under `plan`; returns the step's mean loss (the step's one device sync).
    // Several ranks: this rank's shard, then (once every rank got that far) the gradients and
    // the loss summed over the group and the same update on every rank, which keeps what it
    // needs to undo the update until forget_update (another rank can fail after it).
    double run(const StepWork& work, const guard::Plan& plan);
    // Several ranks: after an attempt that another rank failed, puts the LoRA, the optimizer and
    // the EMA back as they were before this rank's update (a no-op when it did not update).
    void undo_update();
    // The step is agreed: the state undo_update would restore is let go.
    void forget_update() { before_update_.reset(); }
    // One forward+backward at the worst case under `plan` (the largest active bucket, a full
    // micro-batch), no optimizer update, gradients back to undefined. Returns the bucket.
    std::string probe(const guard::Plan& plan);

    // Where the last successful attempt's time went.
    const StepTimes& times() const { return times_; }
    // The buckets the last successful attempt trained (data::BucketSize::key), in order: after
    // the ladder changed the buckets or the frames mid-step, not those the batches were drawn in.
    const std::vector<std::string>& buckets_trained() const { return buckets_trained_; }

    // Frees the static buffers and CUDA graphs of perf.cuda_graphs (after an OOM, and when the
    // plan changes); a no-op without them.
    void release_graphs();

  private:
    // Whether this attempt's micro-batches go through the graphs: block streaming (low_vram 3)
    // fetches weights from the host inside the computation, which stays eager, and so does a
    // family whose prediction is not capturable (ModelFamily::predict_is_capturable).
    bool graphed(const guard::Plan& plan) const;
    double update_together(const StepWork& work, const at::Tensor& loss);
    at::Tensor forward_backward(const data::MicroBatch& micro,
                                const std::vector<data::Batch>& batches, std::int64_t step_index,
                                std::size_t step_items, const guard::Plan* graphed_plan);

    Parts parts_;
    std::uint64_t seed_;
    int gradient_accumulation_;
    double max_grad_norm_;
    StepTimes times_;
    std::vector<std::string> buckets_trained_;
    std::optional<CheckpointState> before_update_;  // several ranks: the undo of this update
    std::unique_ptr<GraphedForwardBackward> graphed_;
};

}  // namespace loom
