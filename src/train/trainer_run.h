#pragma once

// The run's class, shared by the files that implement it by concern (train/trainer.h is the
// public entry): trainer.cpp loads, steps, samples and runs; trainer_guard.cpp is its side as
// the guard's target (the policy's context, applying a plan, releasing after an OOM, measuring);
// trainer_checkpoints.cpp saves checkpoints and resumes from them, across rank counts too.

#include <ATen/ATen.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "loom/config/emit.h"
#include "loom/core/error.h"
#include "loom/core/format.h"
#include "loom/core/logging.h"
#include "loom/core/version.h"
#include "loom/device/device.h"
#include "loom/device/oom_classify.h"
#include "loom/device/step_clock.h"
#include "loom/device/step_graphs.h"
#include "loom/dist/process_group.h"
#include "loom/guard/event_log.h"
#include "loom/guard/guard.h"
#include "loom/guard/log_wording.h"
#include "loom/guard/plan.h"
#include "loom/guard/plan_store.h"
#include "loom/io/atomic_file.h"
#include "loom/lora/assistant_adapter.h"
#include "loom/lora/kohya_metadata.h"
#include "loom/model/family.h"
#include "loom/model/loading/model_fingerprint.h"
#include "loom/model/loading/model_location.h"
#include "loom/train/base_model.h"
#include "loom/train/checkpoint_state.h"
#include "loom/train/group_agreement.h"
#include "loom/train/lora_training.h"
#include "loom/train/low_vram.h"
#include "loom/train/objective.h"
#include "loom/train/plan_bootstrap.h"
#include "loom/train/preflight_probe.h"
#include "loom/train/previews.h"
#include "loom/train/progress.h"
#include "loom/train/run_folder.h"
#include "loom/train/run_record.h"
#include "loom/train/trainer.h"
#include "loom/train/training_data.h"
#include "loom/train/training_encoders.h"
#include "loom/train/training_step.h"
#include "train_log.h"

namespace loom {

namespace fs = std::filesystem;

// The run: loads the model, the data and the LoRA into the guard's phases, then steps, saves and
// samples. Each part is a component of its own (training_data, lora_training, training_step,
// objective, previews, progress, plan_bootstrap, run_record); this class wires them together and
// is the guard's target: the plan's knobs reach the component that owns each.
class Trainer final : public guard::GuardedTarget {
  public:
    Trainer(const config::Job& job, std::size_t index, const TrainOverrides& overrides)
        : job_(job),
          process_(job.config.process.at(index)),
          index_(index),
          overrides_(overrides),
          run_(*process_.training_folder, *process_.name) {
        if (overrides_.group != nullptr) {
            agreement_ = std::make_unique<GroupAgreement>(*overrides_.group);
            if (!leader()) {  // the store and the run folder are rank 0's alone
                overrides_.plan_store = nullptr;
                overrides_.after_checkpoint = nullptr;
            }
        }
    }

    TrainSummary run();

    // guard::GuardedTarget
    void release_after_oom() override;
    void apply_plan(const guard::Plan& from, const guard::Plan& to) override;
    guard::BucketFacts bucket_facts() const override;
    std::optional<guard::Measurement> measure(const guard::Plan& current,
                                              const guard::Plan& candidate) override;

  private:
    void start_guard();
    guard::PolicyContext policy_context() const;
    PlacementOptions placement_options() const;
    // The denoiser's blocks as the ladder's streaming rungs weigh them (Guard's
    // set_stream_facts): before placement and after every low_vram change.
    void tell_stream_facts(LowVramMode& placement);
    void load();
    void prepare_data();
    void maybe_resume();
    void probe_sampling(const guard::Plan& p);
    void save(std::int64_t step, bool final);
    // Several ranks: every rank's CPU generator state, in rank order (a collective); one
    // process: its own.
    std::vector<at::Tensor> rank_rng_states();
    // Several ranks: applies the documented rule for a checkpoint saved by another number of
    // ranks (keep its global batch when the ranks can share it) and gives this rank its RNG.
    void resume_ranks(const CheckpointState& s);
    bool leader() const { return overrides_.group == nullptr || overrides_.group->rank() == 0; }
    int ranks() const { return overrides_.group != nullptr ? overrides_.group->size() : 1; }
    void sample(std::int64_t step);
    void train_steps(TrainSummary& summary, RunRecord* record);
    void finish(TrainSummary& summary) const;
    std::uint64_t seed() const {
        return static_cast<std::uint64_t>(process_.training_seed.value_or(0));
    }
    const guard::Plan& plan() const { return guard_->plan(); }
    PreviewModel preview_model() {
        return {*model_, *lora_, *low_vram_, device_->torch_device(), assistant_.get()};
    }

    const config::Job& job_;
    const config::ProcessConfig& process_;
    std::size_t index_;
    TrainOverrides overrides_;
    RunFolder run_;
    std::unique_ptr<Device> device_;
    std::unique_ptr<GroupAgreement> agreement_;  // several ranks: the guard's agreement
    std::unique_ptr<guard::EventLog> events_;
    std::unique_ptr<guard::Guard> guard_;
    std::unique_ptr<ModelFamily> model_;
    std::unique_ptr<AssistantAdapter> assistant_;  // model.assistant_lora_path, merged into model_
    std::unique_ptr<LowVramMode> low_vram_;
    std::unique_ptr<LoRATraining> lora_;
    std::unique_ptr<TrainingData> data_;
    DiffusionObjective objective_;
    std::unique_ptr<TrainingEncoders> encoders_;
    std::unique_ptr<StepGraphs> graphs_;  // perf.cuda_graphs (declared before its user)
    std::unique_ptr<TrainingStep> step_runner_;
    std::unique_ptr<PreflightProbe> probe_;
    std::int64_t step_ = 0;  // steps done
    bool resumed_ = false;
    std::optional<guard::PlanKey> key_;  // the store's key (with a store and a readable model)
    std::optional<std::int64_t> reused_stable_id_;
    bool start_from_job_ = false;  // the starting plan is the job's own (StartingPlan::from_job)
    bool stopped_early_ = false;   // the --stop-after hook or a stop request ended the loop
};

}  // namespace loom
