#include "loom/train/trainer.h"

#include <cmath>
#include <optional>

#include "trainer_run.h"

namespace loom {

void Trainer::load() {
    lora_.reset();
    low_vram_.reset();
    assistant_.reset();
    model_.reset();  // a retried load first lets go of the failed attempt's weights
    model_ = load_frozen_base(process_);
    if (process_.model.assistant_lora_path) {
        // Merged on the host before placement, so that quantization takes the merged weights.
        assistant_ = std::make_unique<AssistantAdapter>(
            model_->denoiser(), locate_assistant_lora(*process_.model.assistant_lora_path),
            lora_model_of(model_->arch()));
        train_log().info(
            "model.assistant_lora_path: {} ({} modules) merged into the base for "
            "training, taken out of previews",
            assistant_->path().string(), assistant_->modules());
    }
    ObjectiveOptions objective = ObjectiveOptions::from(process_);
    objective.job_batch *= ranks();  // a micro-batch of every rank's items: the slots are global
    objective_ = DiffusionObjective::for_family(objective, *model_);
    // low_vram_ exists only once the model is placed: after an OOM during placement the
    // ladder's new level must not be applied to a half-placed model — the retry reloads.
    auto placement = std::make_unique<LowVramMode>(*model_, *device_, placement_options());
    placement->set_idle_expert_on_host(plan().idle_expert_on_host);  // never placed, then
    // ai-toolkit's layer_offloading_transformer_percent: that share of the blocks streams, counted
    // now that they are known (the first of the streaming order; ai-toolkit picks at random).
    const double offload = process_.model.layer_offloading_transformer_percent;
    if (start_from_job_ && process_.model.layer_offloading && offload < 1.0 &&
        plan().low_vram >= 3 && plan().streamed_blocks == 0 && guard_->change_count() == 0) {
        const int blocks = placement->block_count();
        const int count = std::max(1, static_cast<int>(std::ceil(offload * blocks)));
        if (count < blocks) guard_->set_starting_streamed_blocks(count);
        train_log().info(
            "model.layer_offloading_transformer_percent {}: {} of the {} blocks stream from the "
            "host",
            offload, std::min(count, blocks), blocks);
    }
    start_from_job_ = false;
    tell_stream_facts(*placement);  // a placement that runs out of memory counts blocks
    placement->place_model(plan().low_vram, plan().streamed_blocks);
    low_vram_ = std::move(placement);
    model_->set_gradient_checkpointing(plan().gradient_checkpointing);
    const MemoryStats loaded = device_->stats();
    train_log().info("model: {} ({}), device memory after load: {} ({} bytes allocated)",
                     process_.model.name_or_path, config::to_string(model_->arch()),
                     loaded.to_string(), loaded.allocated);
    // A denoiser of experts: a LoRA for the trained ones only, each in its own file.
    const LoRAModel lora_model =
        with_trained_experts(lora_model_of(model_->arch()), model_->trained_experts());
    run_.set_lora_suffixes(lora_file_suffixes(lora_model));
    lora_ =
        std::make_unique<LoRATraining>(process_, model_->denoiser(), lora_model, *device_, seed());
}

void Trainer::prepare_data() {
    data_ = std::make_unique<TrainingData>(
        process_,
        TrainingData::ModelFacts{
            static_cast<int>(model_->bucket_divisibility()),
            static_cast<int>(model_->temporal_compression()),
            process_.model.name_or_path + "|" + config::to_string(model_->arch()),
            config::arch_info(model_->arch()).controls_in_prompt,
            [model = model_.get()](int64_t w, int64_t h, int64_t tw, int64_t th) {
                return model->control_size(w, h, tw, th);
            }},
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

void Trainer::probe_sampling(const guard::Plan& p) {
    if (!p.sample.enabled || !leader()) return;  // rank 0 alone samples
    std::vector<PreviewRequest> requests = preview_requests(process_);
    for (PreviewRequest& r : requests) r.steps = 1;
    render_previews(preview_model(), std::move(requests), p.sample, process_);
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
    // On sim every step is also timed by the modelled clock, as the measured choice times plans.
    std::optional<StepClock> modelled;
    if (device_->spec().kind == DeviceKind::kSim) {
        modelled.emplace(*device_);
        if (!modelled->modelled()) modelled.reset();  // LOOM_STEP_CLOCK=wall
    }
    while (step_ < tc.steps) {
        const auto t0 = std::chrono::steady_clock::now();
        const double lr = lora_->schedule().lr_at(step_);
        const StepWork work = step_runner_->draw(step_);
        double loss = 0.0;
        if (modelled) modelled->start();
        guard_->run(Phase::kTrainStep, step_ + 1, [&] { loss = step_runner_->run(work, plan()); });
        std::optional<double> modelled_seconds;
        if (modelled) {
            modelled_seconds = modelled->seconds() +
                               modelled->micro_batch_seconds() * plan().gradient_accumulation;
        }
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
        report.modelled_seconds = modelled_seconds;
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
    summary.final_loras = run_.final_lora_files();
    summary.final_lora = summary.final_loras.front();
    if (record) record->end(RunStatus::kCompleted);
    std::string loras;
    for (const fs::path& f : summary.final_loras) loras += (loras.empty() ? "" : ", ") + f.string();
    train_log().info("done: {} (LoRA {}, samples {}, events {}, plan {}{})", run_.root().string(),
                     loras, run_.samples_dir().string(), run_.events_jsonl().string(),
                     run_.plan_yaml().string(),
                     fs::exists(run_.stable_yaml()) ? ", stable plan " + run_.stable_yaml().string()
                                                    : std::string());
    if (guard_->oom_count() > 0) {
        train_log().info(
            "{}", guard::to_line(guard::RecoveredLine{guard_->oom_count(), guard_->change_count(),
                                                      0, guard::describe(plan())}));
    }
    return summary;
}

TrainSummary train_process(const config::Job& job, std::size_t index,
                           const TrainOverrides& overrides) {
    return Trainer(job, index, overrides).run();
}

}  // namespace loom
