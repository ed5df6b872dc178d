#include "trainer_run.h"

namespace loom {

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
    c.experts = arch != nullptr ? config::expert_count(arch->family) : 1;
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
        const std::string from_job =
            overrides_.group->broadcast(leader() ? (start.from_job ? "job" : "") : "", 0);
        start.from_job = from_job == "job";
    }
    reused_stable_id_ = start.reused_stable_id;
    start_from_job_ = start.from_job;
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
// low_vram its level (3 and 2 both ways) and the idle expert; the host threads and sampling are the
// trainer's own.
void Trainer::apply_plan(const guard::Plan& from, const guard::Plan& to) {
    // Captured micro-batches are of the old plan's shapes and kernels.
    if (step_runner_) step_runner_->release_graphs();
    if (from.gradient_checkpointing != to.gradient_checkpointing && model_) {
        model_->set_gradient_checkpointing(to.gradient_checkpointing);
    }
    if (data_) data_->apply_plan(from, to);
    if ((from.low_vram != to.low_vram || from.streamed_blocks != to.streamed_blocks) && low_vram_) {
        low_vram_->set_level(to.low_vram, to.streamed_blocks);
        tell_stream_facts(*low_vram_);  // level 2's codes: the blocks' own sizes now
    }
    if (from.idle_expert_on_host != to.idle_expert_on_host && low_vram_) {
        low_vram_->set_idle_expert_on_host(to.idle_expert_on_host);
    }
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

void Trainer::tell_stream_facts(LowVramMode& placement) {
    LowVramMode::StreamFacts facts = placement.stream_facts();
    guard_->set_stream_facts(std::move(facts.block_bytes), facts.overhead);
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

}  // namespace loom
