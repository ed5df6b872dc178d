#include "loom/train/trainer.h"

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
#include "loom/device/step_graphs.h"
#include "loom/dist/process_group.h"
#include "loom/guard/event_log.h"
#include "loom/guard/guard.h"
#include "loom/guard/log_wording.h"
#include "loom/guard/plan.h"
#include "loom/guard/plan_store.h"
#include "loom/io/atomic_file.h"
#include "loom/lora/kohya_metadata.h"
#include "loom/model/family.h"
#include "loom/model/model_fingerprint.h"
#include "loom/model/model_location.h"
#include "loom/model/stable_diffusion.h"
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
#include "loom/train/training_data.h"
#include "loom/train/training_encoders.h"
#include "loom/train/training_step.h"
#include "train_log.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

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
    PreviewModel preview_model() { return {*model_, *lora_, *low_vram_, device_->torch_device()}; }

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
    bool stopped_early_ = false;  // the --stop-after hook or a stop request ended the loop
};

guard::PolicyContext Trainer::policy_context() const {
    guard::PolicyContext c;
    // A video model's (Wan's) previews' frames and training clips' frames are rungs, the first
    // halving of the clips before any other step rung (the clip length the job asks for is the
    // longest dataset's). An arch loom does not build has no row: no video, guided previews.
    const config::ArchInfo* arch =
        process_.choices.arch ? &config::arch_info(*process_.choices.arch) : nullptr;
    c.video = arch != nullptr && arch->video;
    for (const config::DatasetConfig& d : process_.datasets)
        c.job_frames = std::max(c.job_frames, d.num_frames);
    c.low_vram_levels = LowVramMode::kLevels;
    c.host_threads = at::get_num_threads();
    const std::vector<PreviewRequest> requests = preview_requests(process_);
    c.prompt_count = requests.size();
    c.guidance = (arch == nullptr || arch->guidance == config::GuidanceKind::kClassifierFree) &&
                 std::any_of(requests.begin(), requests.end(),
                             [](const PreviewRequest& r) { return r.guidance_scale > 1.0; });
    c.encoders_idle = TrainingData::encoders_can_idle(process_);
    return c;
}

// The device, the store's key, the starting plan and the guard over them.
void Trainer::start_guard() {
    const std::string device_text = overrides_.device.value_or(process_.device);
    DeviceSpec spec = parse_device_spec(device_text);
    // torchrun's ranks on one node take a GPU each: `cuda` is this rank's (LOCAL_RANK).
    if (overrides_.group != nullptr && spec.kind == DeviceKind::kCuda && device_text == "cuda") {
        spec.index = overrides_.group->facts().local_rank;
    }
    std::optional<std::uint64_t> vram = overrides_.vram;
    if (!vram && process_.oom.vram_limit) vram = process_.oom.vram_limit->bytes;
    device_ = open_device(spec, vram);
    train_log().info("device: {}", device_->description());
    if (overrides_.group != nullptr) {
        train_log().info("the ranks sum their gradients {}",
                         overrides_.group->device_collectives(device_->torch_device())
                             ? "on the device (NCCL)"
                             : "through host memory (Gloo)");
    }
    if (overrides_.plan_store != nullptr) key_ = plan_key(process_, *device_);
    // A data-parallel run's plans are its ranks' together: kept apart from one GPU's.
    if (key_ && ranks() > 1) key_->device_name = format("{} x {}", ranks(), key_->device_name);
    guard::GuardOptions options;
    options.enabled = process_.oom.enabled;
    options.context = policy_context();
    if (leader()) {  // the others write nothing in the run folder
        options.plan_file = run_.plan_yaml();
        options.stable_file = run_.stable_yaml();
    }
    options.stable_after = process_.oom.stable_after;
    options.scale_up = process_.oom.scale_up;
    options.measure = process_.oom.probe;
    options.store = key_ ? overrides_.plan_store : nullptr;
    options.agreement = agreement_.get();
    options.ranks = ranks();
    if (agreement_ && process_.oom.scale_up) {
        train_log().info(
            "oom.scale_up is off with several ranks: its headroom would be one rank's");
    }
    // Rank 0 chooses the plan (plan.yaml, the store's stable plan) and every rank starts on it.
    StartingPlan start;
    if (leader()) {
        start = starting_plan(process_, run_, overrides_.fresh, options.store, key_, *events_);
    }
    if (overrides_.group != nullptr) {
        const std::string text =
            overrides_.group->broadcast(leader() ? guard::plan_to_yaml(start.plan) : "", 0);
        if (!leader()) start.plan = guard::parse_plan(text, "rank 0's starting plan");
    }
    reused_stable_id_ = start.reused_stable_id;
    // A plan.yaml that quantizes otherwise than the job now asks: the run is recorded under the
    // qtypes it trains with, so that no job of the job's qtypes later takes its plan.
    if (key_) key_->qtype = guard::qtype_text(start.plan);
    guard_ = std::make_unique<guard::Guard>(*device_, start.plan, options, *events_);
    guard_->set_target(this);
    if (plan().host.threads > 0) at::set_num_threads(plan().host.threads);
    if (leader()) guard::save_plan(run_.plan_yaml(), plan());
}

void Trainer::release_after_oom() {
    if (step_runner_) step_runner_->release_graphs();  // before the gradients: it holds them
    if (step_runner_) step_runner_->undo_update();     // another rank failed after this updated
    if (lora_) lora_->optimizer().zero_grad();         // undefined, not zero-filled: nothing held
    if (low_vram_) low_vram_->drop_prefetched();       // layers block streaming copied ahead
    if (!low_vram_) model_.reset();                    // a load that failed mid-placement
}

// Each knob reaches its owner: the denoiser its checkpointing, the data its buckets and caches,
// low_vram its level (3 and 2 both ways); the host threads and sampling are the trainer's own.
void Trainer::apply_plan(const guard::Plan& from, const guard::Plan& to) {
    // Captured micro-batches are of the old plan's shapes and kernels.
    if (step_runner_) step_runner_->release_graphs();
    if (from.gradient_checkpointing != to.gradient_checkpointing && model_) {
        model_->set_gradient_checkpointing(to.gradient_checkpointing);
    }
    if (data_) data_->apply_plan(from, to);
    if (from.low_vram != to.low_vram && low_vram_) low_vram_->set_level(to.low_vram);
    if (from.host.threads != to.host.threads && to.host.threads > 0) {
        at::set_num_threads(to.host.threads);
    }
    if (from.sample.enabled && !to.sample.enabled) {
        train_log().warn(
            "preview sampling is OFF for the rest of this run: even the smallest preview "
            "did not fit next to training (re-enable it with a smaller sample size once "
            "the run is stable)");
    }
}

// The guard's measured choice: the candidate applied to the live trainer, its training pass
// timed, everything it held released, the current plan back in place. Applying can itself run
// out of memory (block streaming's weights back on the device): that candidate does not fit.
// Going back is safe after a partial apply: every knob's owner moves only when it differs.
std::optional<guard::Measurement> Trainer::measure(const guard::Plan& current,
                                                   const guard::Plan& candidate) {
    if (!probe_ || !step_runner_) return std::nullopt;
    // A candidate with a quantized base from a float32 plan: the float32 weights wait on the
    // host so that the live plan comes back exactly.
    const bool quantized_trial = candidate.low_vram >= 2 && current.low_vram < 2;
    if (quantized_trial) low_vram_->keep_originals(true);
    std::optional<guard::Measurement> m;
    std::exception_ptr failure;
    try {
        apply_plan(current, candidate);
        m = probe_->measure(candidate);
    } catch (...) {
        failure = std::current_exception();
    }
    const std::uint64_t peak = device_->stats().peak_allocated;
    release_after_oom();
    device_->empty_cache();
    apply_plan(candidate, current);
    if (quantized_trial) low_vram_->keep_originals(false);
    if (failure) {
        if (classify(failure) == OomKind::kNotOom) std::rethrow_exception(failure);
        m = guard::Measurement{false, peak, 0.0};
    }
    return m;
}

guard::BucketFacts Trainer::bucket_facts() const {
    return data_ ? data_->bucket_facts() : guard::BucketFacts{};
}

// The perf switches and level 2's qtypes, as the plan carries them (from model.qtype, and
// qtype_te with quantize_te; or from plan.yaml on a restart).
PlacementOptions Trainer::placement_options() const {
    PlacementOptions o;
    o.stream_prefetch = process_.perf.stream_prefetch;
    o.channels_last = process_.perf.channels_last;
    o.base_qtype = plan().qtype;
    o.encoder_qtype = plan().qtype_te;
    const std::string name = guard::qtype_text(plan());
    // Beside the latent cache, named for what the codes depend on: the weights, the dtype they
    // were loaded in (train.dtype) and the qtypes.
    const std::string fingerprint =
        model_fingerprint(locate_model(process_.model.name_or_path)).substr(0, 16) + "-" +
        process_.model.dtype;
    o.quantized_cache =
        run_.root() / "cache" / "quantized" / (fingerprint + "-" + name + ".safetensors");
    return o;
}

// The load phase: the model read into host memory and placed as low_vram says, then the LoRA.
void Trainer::load() {
    lora_.reset();
    low_vram_.reset();
    model_.reset();  // a retried load first lets go of the failed attempt's weights
    model_ = load_frozen_base(process_);
    objective_ = DiffusionObjective::for_family(ObjectiveOptions::from(process_), *model_);
    // low_vram_ exists only once the model is placed: after an OOM during placement the
    // ladder's new level must not be applied to a half-placed model — the retry reloads.
    auto placement = std::make_unique<LowVramMode>(*model_, *device_, placement_options());
    placement->place_model(plan().low_vram);
    low_vram_ = std::move(placement);
    model_->set_gradient_checkpointing(plan().gradient_checkpointing);
    const MemoryStats loaded = device_->stats();
    train_log().info("model: {} ({}), device memory after load: {} ({} bytes allocated)",
                     process_.model.name_or_path, config::to_string(model_->arch()),
                     loaded.to_string(), loaded.allocated);
    lora_ = std::make_unique<LoRATraining>(process_, model_->denoiser(), model_->denoiser_kind(),
                                           *device_, seed());
}

void Trainer::prepare_data() {
    data_ = std::make_unique<TrainingData>(
        process_,
        TrainingData::ModelFacts{
            static_cast<int>(model_->bucket_divisibility()),
            static_cast<int>(model_->temporal_compression()),
            process_.model.name_or_path + "|" + config::to_string(model_->arch())},
        plan(), run_.root(), seed(), ranks());
    encoders_ = std::make_unique<TrainingEncoders>(*model_, *low_vram_, *device_, seed());
    if (process_.perf.cuda_graphs) {
        graphs_ = make_step_graphs(*device_);
        if (graphs_->captures()) {
            train_log().info(
                "perf.cuda_graphs: each micro-batch shape is captured as a CUDA graph on its "
                "second use and replayed after");
        } else {
            train_log().info(
                "perf.cuda_graphs: {} has nothing to capture; micro-batches run on the same "
                "static buffers, eagerly",
                device_->spec().to_string());
        }
    }
    step_runner_ = std::make_unique<TrainingStep>(
        TrainingStep::Parts{*device_, *model_, *data_, *lora_, objective_, *guard_,
                            encoders_->latent_encoder(), encoders_->text_encoder(), graphs_.get(),
                            data::Shard{overrides_.group ? overrides_.group->rank() : 0, ranks()},
                            overrides_.group},
        seed(), process_.train.gradient_accumulation, process_.train.max_grad_norm);
    probe_ = std::make_unique<PreflightProbe>(*guard_, *events_, *device_, *step_runner_,
                                              [this](const guard::Plan& p) { probe_sampling(p); });
}

void Trainer::maybe_resume() {
    if (overrides_.fresh) return;
    std::optional<CheckpointState> s;
    if (leader()) {
        s = load_newest_checkpoint(run_, [&](std::int64_t step, const std::string& error) {
            train_log().warn(
                "the checkpoint at step {} cannot be loaded ({}); resuming from the one "
                "before it",
                step, error);
            events_->record("checkpoint_unreadable", {{"step", step}, {"error", error}});
        });
    }
    if (overrides_.group != nullptr) {  // every rank resumes from the one rank 0 chose
        const std::string chosen =
            overrides_.group->broadcast(leader() && s ? std::to_string(s->step) : "", 0);
        if (!leader() && !chosen.empty()) {
            s = load_checkpoint(run_.checkpoint_dir(std::stoll(chosen)));
        }
    }
    if (!s) return;
    lora_->restore(*s, run_.checkpoint_dir(s->step));
    resume_ranks(*s);
    data_->order().restore(data::cursor_from_json(s->data_cursor));
    step_ = s->step;
    resumed_ = true;
    train_log().info("resuming {} from the checkpoint at step {}", run_.root().string(), step_);
}

// The rule for a checkpoint saved by another number of ranks (docs/MULTI_GPU.md): its global
// batch is kept, shared by the ranks there are now, so training continues as it would have (the
// same items, noise and updates); when they cannot share it evenly the resume stops, naming both.
void Trainer::resume_ranks(const CheckpointState& s) {
    const int job_batch = data_->order().batch_size() / ranks();
    const int saved_batch = s.global_batch > 0 ? s.global_batch : job_batch * s.world_size;
    // The same number of ranks: the job's batch, as ever (a changed batch_size restarts the
    // epoch's order, data_order.h).
    if (s.world_size != ranks()) {
        if (saved_batch % ranks() != 0) {
            throw UsageError(format(
                "the checkpoint at step {} in {} was saved by {} rank(s) with a global batch of {} "
                "items; {} ranks cannot share it evenly. Resume with a number of ranks that "
                "divides {}, or start over with --fresh",
                s.step, run_.state_dir().string(), s.world_size, saved_batch, ranks(),
                saved_batch));
        }
        train_log().info(
            "the checkpoint at step {} was saved by {} rank(s); {} rank(s) go on with its "
            "global batch of {} items ({} each), so the run continues as it would have",
            s.step, s.world_size, ranks(), saved_batch, saved_batch / ranks());
        events_->record("resume_ranks", {{"step", s.step},
                                         {"saved_ranks", s.world_size},
                                         {"ranks", ranks()},
                                         {"global_batch", saved_batch}});
        data_->use_global_batch(saved_batch);
    }
    const int r = overrides_.group != nullptr ? overrides_.group->rank() : 0;
    // A rank the saving run did not have continues from rank 0's generator.
    const at::Tensor& rng =
        r > 0 && std::size_t(r) <= s.rng_ranks.size() ? s.rng_ranks[std::size_t(r) - 1] : s.rng_cpu;
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    cpu.set_state(rng);
}

std::vector<at::Tensor> Trainer::rank_rng_states() {
    const at::Tensor mine = at::detail::getDefaultCPUGenerator().get_state();
    if (overrides_.group == nullptr) return {mine};
    const std::string bytes(static_cast<const char*>(mine.data_ptr()),
                            static_cast<std::size_t>(mine.numel()));
    std::vector<at::Tensor> out;
    for (const std::string& b : overrides_.group->all_gather(bytes)) {
        at::Tensor t = at::empty({static_cast<std::int64_t>(b.size())}, at::kByte);
        std::memcpy(t.data_ptr(), b.data(), b.size());
        out.push_back(t);
    }
    return out;
}

// One sampling pass under `p`'s sampling knobs: every preview with a single denoising step,
// which has the full sampling peak (the UNet pass and the VAE decode).
void Trainer::probe_sampling(const guard::Plan& p) {
    if (!p.sample.enabled || !leader()) return;  // rank 0 alone samples
    std::vector<PreviewRequest> requests = preview_requests(process_);
    for (PreviewRequest& r : requests) r.steps = 1;
    render_previews(preview_model(), std::move(requests), p.sample, process_);
}

void Trainer::save(std::int64_t step, bool final) {
    // First, before anything can run out of memory: every rank takes part in the gathering.
    std::vector<at::Tensor> rngs;
    if (!final) rngs = rank_rng_states();
    if (!leader()) return;
    const fs::path file = final ? run_.final_lora() : run_.step_lora(step);
    lora_->save_file(
        file, process_,
        kohya_metadata(job_, process_, {step, model_->arch(), plan().gradient_checkpointing}));
    if (!final) {
        CheckpointState s = lora_->checkpoint(step);
        s.rng_cpu = rngs.front();
        s.rng_ranks.assign(rngs.begin() + 1, rngs.end());
        s.world_size = ranks();
        s.global_batch = data_->order().batch_size();
        s.data_cursor = data::cursor_to_json(data_->order().cursor());
        s.plan_yaml = guard::plan_to_yaml(plan());
        save_checkpoint(run_.checkpoint_dir(step), s);
        run_.prune(static_cast<std::size_t>(process_.save.max_step_saves_to_keep));
    }
    events_->record("save", {{"step", step}, {"file", file.string()}, {"final", final}});
    train_log().info("saved {}", file.string());
    if (!final && overrides_.after_checkpoint) {
        try {
            overrides_.after_checkpoint(run_.root());
        } catch (const std::exception& e) {
            train_log().warn("after the checkpoint at step {}: {}", step, e.what());
        }
    }
}

void Trainer::sample(std::int64_t step) {
    if (!plan().sample.enabled || !leader()) return;  // rank 0 alone samples
    std::vector<PreviewRequest> requests = preview_requests(process_);
    if (requests.empty()) return;
    const std::vector<at::Tensor> images =
        render_previews(preview_model(), std::move(requests), plan().sample, process_);
    write_previews(run_, step, images, process_.sample.fps);
    guard_->sample_ran();
    train_log().info("wrote {} samples at step {}", images.size(), step);
}

// The training loop: a step, its metrics, saves and samples, until the job's steps are done or
// the run is stopped (the --stop-after hook as if killed; a stop request after a checkpoint).
void Trainer::train_steps(TrainSummary& summary, RunRecord* record) {
    const config::TrainConfig& tc = process_.train;
    const config::SampleConfig& sc = process_.sample;
    Progress progress(leader() ? run_.metrics_jsonl() : fs::path{}, tc.steps,
                      leader() && overrides_.progress_line && ::isatty(STDERR_FILENO),
                      process_.logging.log_every);
    while (step_ < tc.steps) {
        const auto t0 = std::chrono::steady_clock::now();
        const double lr = lora_->schedule().lr_at(step_);
        const StepWork work = step_runner_->draw(step_);
        double loss = 0.0;
        guard_->run(Phase::kTrainStep, step_ + 1, [&] { loss = step_runner_->run(work, plan()); });
        step_runner_->forget_update();  // every rank trained the step
        ++step_;
        guard_->step_succeeded(step_);
        guard_->maybe_scale_up(step_, [&](const guard::Plan& p) { probe_->check(p); });
        StepReport report{step_, loss, lr};
        report.seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        report.buckets = step_runner_->buckets_trained();
        report.memory = device_->stats();
        report.times = step_runner_->times();
        summary.losses.push_back(loss);
        progress.step_done(report);
        if (overrides_.stop_after_steps &&
            progress.steps_reported() >= *overrides_.stop_after_steps) {
            if (record) record->end(RunStatus::kStopped);
            stopped_early_ = true;
            return;  // as if killed: no final save
        }
        bool stop = overrides_.stop_requested != nullptr && overrides_.stop_requested->load();
        // A stop signal reaches the ranks at different steps: they stop together.
        if (overrides_.group != nullptr) stop = overrides_.group->any(stop);
        if (step_ < tc.steps && (step_ % process_.save.save_every == 0 || stop)) {
            guard_->run(Phase::kSave, step_, [&] { save(step_, false); });
        }
        if (stop && step_ < tc.steps) {
            train_log().warn(
                "stopped at step {} on request; checkpoint saved, rerun the job to resume", step_);
            events_->record("interrupted", {{"step", step_}});
            summary.interrupted = true;
            if (record) record->end(RunStatus::kInterrupted);
            stopped_early_ = true;
            return;
        }
        if (step_ < tc.steps && step_ >= sc.sample_start_step && step_ % sc.sample_every == 0 &&
            plan().sample.enabled) {
            guard_->run(Phase::kSample, step_, [&] { sample(step_); });
        }
    }
}

void Trainer::finish(TrainSummary& summary) const {
    summary.end_step = step_;
    summary.ooms = guard_->oom_count();
    summary.plan_changes = guard_->change_count();
    summary.final_plan = guard::describe(plan());
    summary.reused_stable_id = reused_stable_id_;
}

TrainSummary Trainer::run() {
    TrainSummary summary;
    // The folder is this trainer's before anything in it is touched; it, loom.log and the
    // store's record are released on every exit path.
    std::optional<RunRecord> record;
    if (leader()) {
        record.emplace(run_, RunLockOptions{overrides_.wait_for_run_folder, true, [this] {
                                                return overrides_.stop_requested &&
                                                       overrides_.stop_requested->load();
                                            }});
    }
    if (overrides_.fresh &&
        leader()) {  // the old checkpoints are moved aside: no rerun resumes them
        if (const auto aside = run_.set_aside_checkpoints()) {
            train_log().info("--fresh: the previous checkpoints moved to {}", aside->string());
        }
    }
    if (leader()) write_file_atomic(run_.config_yaml(), config::emit_job_yaml(job_));
    train_log().info("loom {} — run folder {}", kVersion, run_.root().string());
    if (overrides_.group != nullptr) {
        train_log().info(
            "rank {} of {}: a global batch of {} x {} items, rank 0 writes the run folder",
            overrides_.group->rank(), ranks(), ranks(),
            process_.datasets.front().batch_size.value_or(process_.train.batch_size));
    }
    events_ = std::make_unique<guard::EventLog>(leader() ? run_.events_jsonl() : fs::path{});
    start_guard();
    events_->record("start", {{"device", device_->description()},
                              {"total", device_->stats().total},
                              {"plan", guard::describe(plan())},
                              {"fresh", overrides_.fresh}});
    if (key_ && record) {
        record->record_in(*overrides_.plan_store,
                          {*key_, *process_.name, fs::absolute(run_.root()).string(),
                           config::emit_job_yaml(job_), index_, plan()},
                          [this] {
                              return guard::RunEnd{"", step_, guard_->oom_count(), plan()};
                          });
    }
    guard_->check_device_clean();
    guard_->run(Phase::kLoad, std::nullopt, [&] { load(); });
    prepare_data();
    maybe_resume();
    guard_->run(Phase::kCache, std::nullopt, [&] {
        if (data_->caches_latents()) {
            std::optional<LowVramMode::EncodersOnDevice> encoders;  // once for the whole pass
            if (!low_vram_->encode_on_host()) encoders.emplace(*low_vram_);
            data_->cache_all_latents(encoders_->latent_encoder());
            data_->cache_all_text(encoders_->text_encoder());
        }
    });
    summary.run_folder = run_.root();
    summary.resumed = resumed_;
    summary.start_step = step_;

    const config::TrainConfig& tc = process_.train;
    if (process_.oom.probe && step_ < tc.steps) probe_->run();
    if ((step_ == 0 && !tc.skip_first_sample) || tc.force_first_sample) {
        guard_->run(Phase::kFirstSample, std::nullopt, [&] { sample(step_); });
    }
    train_steps(summary, record ? &*record : nullptr);
    if (stopped_early_) {
        finish(summary);
        return summary;
    }
    // The last checkpoint: a rerun of a finished job resumes at the end.
    guard_->run(Phase::kSave, step_, [&] { save(step_, false); });
    guard_->run(Phase::kSave, step_, [&] { save(step_, true); });
    guard_->run(Phase::kSample, step_, [&] { sample(step_); });
    guard_->finish(step_);
    if (const auto p = low_vram_->prefetch_stats()) {
        train_log().info(
            "stream prefetch: {} fetches from copies made ahead, {} on demand, {} copies "
            "unused, {} orders learned",
            p->hits, p->direct, p->wasted, p->periods);
    }
    finish(summary);
    summary.final_lora = run_.final_lora();
    if (record) record->end(RunStatus::kCompleted);
    train_log().info("done: {} (LoRA {}, samples {}, events {}, plan {}{})", run_.root().string(),
                     run_.final_lora().string(), run_.samples_dir().string(),
                     run_.events_jsonl().string(), run_.plan_yaml().string(),
                     fs::exists(run_.stable_yaml()) ? ", stable plan " + run_.stable_yaml().string()
                                                    : std::string());
    if (guard_->oom_count() > 0) {
        train_log().info(
            "{}", guard::to_line(guard::RecoveredLine{guard_->oom_count(), guard_->change_count(),
                                                      0, guard::describe(plan())}));
    }
    return summary;
}

}  // namespace

TrainSummary train_process(const config::Job& job, std::size_t index,
                           const TrainOverrides& overrides) {
    return Trainer(job, index, overrides).run();
}

}  // namespace loom
