#include "loom/train/trainer.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "loom/config/emit.h"
#include "loom/core/byte_size.h"
#include "loom/core/error.h"
#include "loom/core/logging.h"
#include "loom/core/version.h"
#include "loom/data/caption.h"
#include "loom/data/data_order.h"
#include "loom/data/dataset.h"
#include "loom/data/image.h"
#include "loom/data/image_tensor.h"
#include "loom/data/micro_batch.h"
#include "loom/data/tensor_cache.h"
#include "loom/device/device.h"
#include "loom/device/sim_allocator.h"
#include "loom/guard/event_log.h"
#include "loom/guard/guard.h"
#include "loom/guard/plan.h"
#include "loom/guard/plan_reuse.h"
#include "loom/guard/plan_store.h"
#include "loom/io/atomic_file.h"
#include "loom/lora/lora_file.h"
#include "loom/lora/lora_network.h"
#include "loom/model/model_fingerprint.h"
#include "loom/model/stable_diffusion.h"
#include "loom/train/adamw.h"
#include "loom/train/checkpoint_state.h"
#include "loom/train/ema.h"
#include "loom/train/low_vram.h"
#include "loom/train/lr_schedule.h"
#include "loom/train/preview_sampler.h"
#include "loom/train/run_folder.h"
#include "loom/train/step_times.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

const Logger& log() {
    static const Logger l = logger("train");
    return l;
}

bool is_bf16(const std::string& dtype) {
    return dtype == "bf16" || dtype == "bfloat16";
}

at::ScalarType save_dtype(const std::string& d) {
    if (d == "float16" || d == "fp16" || d == "half") return at::kHalf;
    if (d == "bf16" || d == "bfloat16") return at::kBFloat16;
    return at::kFloat;
}

std::string iso_now_ms() {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
    return std::to_string(ms);
}

std::string format_eta(double seconds) {
    const auto s = static_cast<long long>(seconds);
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%02lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
    return buf;
}

// One image of the training set at one resolution, flipped or not, with its dataset's caption
// options.
struct TrainingItem {
    std::size_t dataset;
    const data::ImageRecord* image;
    data::DatasetItem item;
};

// The work of one training step, drawn once: the batches the data order handed out for it and
// the torch RNG state before it. A retry after an OOM trains on exactly these (DESIGN.md
// "Retry semantics"), however the plan now cuts them into micro-batches.
struct StepWork {
    std::int64_t index = 0;  // 0-based; the step's number is index + 1
    std::vector<data::Batch> batches;
    at::Tensor rng_state;
};

// Swaps the EMA weights in for its lifetime (saving and sampling use them), back out after —
// also when an OOM unwinds through it.
class EmaSwap {
  public:
    EmaSwap(Ema* ema, std::vector<at::Tensor> params) : ema_(ema), params_(std::move(params)) {
        if (ema_) ema_->swap(params_);
    }
    ~EmaSwap() {
        if (ema_) ema_->swap(params_);
    }
    EmaSwap(const EmaSwap&) = delete;
    EmaSwap& operator=(const EmaSwap&) = delete;

  private:
    Ema* ema_;
    std::vector<at::Tensor> params_;
};

class Trainer final : public guard::GuardedTarget {
  public:
    Trainer(const config::Job& job, std::size_t index, const TrainOverrides& overrides)
        : job_(job),
          process_(job.config.process.at(index)),
          index_(index),
          overrides_(overrides),
          run_(*process_.training_folder, *process_.name) {}

    TrainSummary run();
    // The run ended by an error: the store hears "failed" (the error itself propagates).
    void record_failure() noexcept;

    // guard::GuardedTarget
    void release_after_oom() override;
    void apply_plan(const guard::Plan& from, const guard::Plan& to) override;
    guard::BucketFacts bucket_facts() const override;

  private:
    void set_aside_old_state();
    guard::Plan initial_plan();
    std::optional<guard::PlanKey> plan_key() const;
    std::optional<guard::Plan> reuse_from_store(const guard::Plan& job_plan);
    void record_end(const std::string& status);
    void finish_summary(TrainSummary& summary) const;
    guard::PolicyContext policy_context() const;
    void open_device();
    void load_model();
    void prepare_data();
    void cache_latents();
    void build_caches(const guard::Plan& p);
    std::unique_ptr<data::TextEmbeddingCache> make_text_cache(const guard::Plan& p) const;
    void attach_lora();
    void maybe_resume();
    void probe();
    std::string probe_training(const guard::Plan& p);
    void probe_sampling(const guard::Plan& p);
    void probe_candidate(const guard::Plan& candidate);
    StepWork draw_step(std::int64_t index);
    double train_step(const StepWork& work);
    at::Tensor forward_backward(const data::MicroBatch& micro,
                                const std::vector<data::Batch>& batches, std::int64_t step_index,
                                std::size_t step_items);
    at::Tensor latent_for(const TrainingItem& item, data::BucketSize bucket);
    at::Tensor context_for(const std::string& caption);
    void save(std::int64_t step, bool final);
    std::vector<PreviewRequest> preview_requests() const;
    std::vector<at::Tensor> render_previews(std::vector<PreviewRequest> requests,
                                            const guard::SamplePlan& sample_plan);
    void sample(std::int64_t step);
    void write_metrics(std::int64_t step, double loss, double lr, double seconds,
                       const std::vector<std::string>& buckets);
    void log_buckets() const;
    SafetensorsMetadata lora_metadata(std::int64_t step) const;
    std::uint64_t seed() const {
        return static_cast<std::uint64_t>(process_.training_seed.value_or(0));
    }
    const guard::Plan& plan() const { return guard_->plan(); }

    const config::Job& job_;
    const config::ProcessConfig& process_;
    std::size_t index_;
    TrainOverrides overrides_;
    RunFolder run_;
    std::unique_ptr<Device> device_;
    std::unique_ptr<guard::EventLog> events_;
    std::unique_ptr<guard::Guard> guard_;
    StableDiffusion model_;
    std::vector<data::ScannedDataset> datasets_;
    std::vector<data::CaptionOptions> caption_options_;
    std::vector<data::DatasetItem> dataset_items_;  // what buckets are assigned from
    std::vector<data::ImageSize> image_sizes_;
    int divisibility_ = 8;
    std::vector<TrainingItem> items_;
    std::unique_ptr<data::DataOrder> order_;
    std::unique_ptr<data::LatentCache> latent_cache_;
    std::unique_ptr<data::TextEmbeddingCache> text_cache_;
    bool cache_latents_ = false;
    bool cache_disk_latents_ = false;
    bool cache_text_ = false;
    std::string cache_identity_;
    std::unique_ptr<LowVramMode> low_vram_;
    std::unique_ptr<LoRANetwork> network_;
    std::unique_ptr<AdamW> optimizer_;
    std::unique_ptr<Ema> ema_;
    LrSchedule schedule_;
    NoiseSchedule noise_schedule_;
    std::int64_t step_ = 0;
    StepTimes step_times_;       // of the step's last (successful) attempt
    std::ofstream metrics_out_;  // metrics.jsonl, open for the run: one line per step
    bool resumed_ = false;
    std::optional<guard::PlanKey> key_;  // the store's key (with a store and a readable model)
    guard::PlanStore* store_ = nullptr;  // set once the run is recorded there
    std::optional<std::int64_t> reused_stable_id_;
};

// --fresh starts over: the old run's checkpoints would otherwise be resumed by the next rerun
// (or by the supervisor's restart, which never passes --fresh). They are moved aside, not
// deleted: nothing already saved is lost.
void Trainer::set_aside_old_state() {
    if (!fs::exists(run_.state_dir()) || run_.complete_checkpoints().empty()) return;
    const fs::path aside = run_.root() / ("state.before-fresh-" + iso_now_ms());
    fs::rename(run_.state_dir(), aside);
    log().info("--fresh: the previous checkpoints moved to {}", aside.string());
}

// The store's key for this run: computed from files and the device, before any weight is
// loaded, so a reused plan also governs the load. nullopt when the model cannot be read (the
// load reports that properly).
std::optional<guard::PlanKey> Trainer::plan_key() const {
    guard::PlanKey key;
    key.arch = process_.model.arch.value_or("");
    try {
        key.model_fingerprint = model_fingerprint(process_.model.name_or_path);
    } catch (const Error& e) {
        log().debug("no stable-store key: {}", e.what());
        return std::nullopt;
    }
    key.device_name = device_->hardware_name();
    key.total_memory = device_->stats().total;
    key.dtype = process_.train.dtype;
    key.rank = process_.network.linear;
    for (const config::DatasetConfig& d : process_.datasets) {
        for (int r : d.resolution) key.max_resolution = std::max(key.max_resolution, r);
        key.frames = std::max(key.frames, d.num_frames);
    }
    return key;
}

// oom.reuse_stable: auto — when the store saw a comparable plan fail for this key, start from
// its stable plan (only ever lighter than the job's), knob by knob in the log.
std::optional<guard::Plan> Trainer::reuse_from_store(const guard::Plan& job_plan) {
    if (!key_ || process_.oom.reuse_stable != "auto") return std::nullopt;
    const std::optional<guard::Reuse> reuse =
        guard::reuse_stable_plan(job_plan, overrides_.plan_store->known_plans(*key_));
    if (!reuse) return std::nullopt;
    log().warn("{}:", reuse->reason);
    for (const guard::KnobChange& c : reuse->changes) {
        log().warn("  {}: {} -> {}", c.knob, c.from, c.to);
    }
    events_->record("reuse", {{"stable_id", reuse->stable_id},
                              {"reason", reuse->reason},
                              {"plan", guard::describe(reuse->plan)}});
    reused_stable_id_ = reuse->stable_id;
    return reuse->plan;
}

guard::Plan Trainer::initial_plan() {
    const guard::Plan job_plan = guard::plan_from_job(process_);
    if (overrides_.fresh || !fs::exists(run_.plan_yaml())) {
        return reuse_from_store(job_plan).value_or(job_plan);
    }
    guard::Plan p = guard::load_plan(run_.plan_yaml());
    // A persisted plan only ever makes the job lighter; what the job asks for now still counts
    // where it is the lighter choice, and the batch semantics are the job's.
    if (p.effective_batch() != job_plan.effective_batch()) {
        log().warn(
            "{} was written for an effective batch of {}, the job now asks for {}; "
            "using the job's batch {} x {}",
            run_.plan_yaml().string(), p.effective_batch(), job_plan.effective_batch(),
            job_plan.batch_size, job_plan.gradient_accumulation);
        p.batch_size = job_plan.batch_size;
        p.gradient_accumulation = job_plan.gradient_accumulation;
    }
    p.gradient_checkpointing = p.gradient_checkpointing || job_plan.gradient_checkpointing;
    p.sample.enabled = p.sample.enabled && job_plan.sample.enabled;
    log().info("starting from the persisted plan {}: {}", run_.plan_yaml().string(),
               guard::describe(p));
    for (const guard::KnobChange& c : guard::diff(job_plan, p)) {
        log().info("  {}: the job says {}, the plan says {}", c.knob, c.from, c.to);
    }
    return p;
}

guard::PolicyContext Trainer::policy_context() const {
    guard::PolicyContext c;
    c.video = false;  // SD 1.x / SDXL: image models
    c.low_vram_levels = LowVramMode::kLevels;
    c.host_threads = at::get_num_threads();
    const std::vector<PreviewRequest> requests = preview_requests();
    c.prompt_count = requests.size();
    c.guidance = std::any_of(requests.begin(), requests.end(),
                             [](const PreviewRequest& r) { return r.guidance_scale > 1.0; });
    return c;
}

void Trainer::release_after_oom() {
    if (optimizer_) optimizer_->zero_grad();     // undefined, not zero-filled: nothing held
    if (!low_vram_) model_ = StableDiffusion{};  // a load that failed mid-placement
}

void Trainer::apply_plan(const guard::Plan& from, const guard::Plan& to) {
    if (from.gradient_checkpointing != to.gradient_checkpointing && model_.unet) {
        model_.unet->set_gradient_checkpointing(to.gradient_checkpointing);
    }
    if (from.max_bucket_pixels != to.max_bucket_pixels && order_) {
        order_->replace_plan(data::assign_buckets(dataset_items_, image_sizes_, divisibility_,
                                                  to.max_bucket_pixels));
        log_buckets();
    }
    if (from.host.memory_caches != to.host.memory_caches && latent_cache_) {
        latent_cache_->clear_memory();
        text_cache_->clear_memory();
        build_caches(to);
        log().warn("latents and text embeddings are now cached on disk instead of RAM");
    }
    if (from.low_vram != to.low_vram && low_vram_) low_vram_->raise_to(to.low_vram);
    if (from.low_vram == 0 && to.low_vram > 0 && text_cache_) text_cache_ = make_text_cache(to);
    if (from.host.threads != to.host.threads && to.host.threads > 0) {
        at::set_num_threads(to.host.threads);
    }
    if (from.sample.enabled && !to.sample.enabled) {
        log().warn(
            "preview sampling is OFF for the rest of this run: even the smallest preview "
            "did not fit next to training (re-enable it with a smaller sample size once "
            "the run is stable)");
    }
}

guard::BucketFacts Trainer::bucket_facts() const {
    guard::BucketFacts f;
    if (!order_) return f;
    const data::BucketPlan& plan = order_->plan();
    f.active = 0;
    f.smallest_side = std::numeric_limits<int>::max();
    for (const data::Bucket& b : plan.buckets) {
        if (b.items.empty()) continue;
        ++f.active;
        f.smallest_side = std::min({f.smallest_side, b.size.width, b.size.height});
    }
    if (f.active == 0) f.smallest_side = 256;
    if (const data::Bucket* largest = plan.largest()) f.largest_area = largest->size.area();
    f.next_cap = data::next_smaller_cap(plan);
    return f;
}

void Trainer::open_device() {
    const DeviceSpec spec = parse_device_spec(overrides_.device.value_or(process_.device));
    std::optional<std::uint64_t> vram = overrides_.vram;
    if (!vram && process_.oom.vram_limit) vram = process_.oom.vram_limit->bytes;
    device_ = loom::open_device(spec, vram);
    log().info("device: {}", device_->description());
}

void Trainer::load_model() {
    const std::string& arch = *process_.model.arch;
    const ArchSpec* spec = find_arch_spec(arch);
    if (spec == nullptr || !spec->trainable) {
        throw ConfigError("", "config.process.model.arch",
                          "model.arch '" + arch + "' is not one loom can train (sd1, sdxl)");
    }
    LoadOptions options;
    options.dtype = is_bf16(process_.train.dtype) ? at::kBFloat16 : at::kFloat;
    low_vram_.reset();
    model_ = StableDiffusion{};  // a retried load first lets go of the failed attempt's weights
    {
        // Weights are read into host memory and placed by LowVramMode, as on a real device
        // (on `sim` an unscoped host allocation would count against the budget).
        HostScope host;
        model_ = load_stable_diffusion(process_.model.name_or_path, options);
    }
    if (model_.arch != arch && !(arch == "sd1" && model_.arch == "sd2")) {
        log().warn("the job says arch '{}' but {} is '{}'; using '{}'", arch,
                   process_.model.name_or_path, model_.arch, model_.arch);
    }
    if (process_.model.is_v_pred) model_.scheduler.prediction_type = "v_prediction";
    noise_schedule_ = NoiseSchedule(model_.scheduler);
    for (torch::nn::Module* m : std::initializer_list<torch::nn::Module*>{
             model_.unet.get(), model_.vae.get(), model_.text_encoder.get(),
             model_.text_encoder_2 ? model_.text_encoder_2.get() : nullptr}) {
        if (m == nullptr) continue;
        for (auto& p : m->parameters()) p.requires_grad_(false);  // frozen base
    }
    // low_vram_ exists only once the model is placed: after an OOM during placement the
    // ladder's new level must not be applied to a half-placed model — the retry reloads.
    auto placement = std::make_unique<LowVramMode>(model_, *device_);
    placement->place_model(plan().low_vram);
    low_vram_ = std::move(placement);
    model_.unet->set_gradient_checkpointing(plan().gradient_checkpointing);
    log().info("model: {} ({}), device memory after load: {}", process_.model.name_or_path,
               model_.arch, device_->stats().to_string());
}

void Trainer::prepare_data() {
    divisibility_ = static_cast<int>(find_arch_spec(model_.arch)->bucket_divisibility);
    std::size_t first_image = 0;
    for (std::size_t d = 0; d < process_.datasets.size(); ++d) {
        const config::DatasetConfig& dc = process_.datasets[d];
        datasets_.push_back(data::scan_dataset(dc));
        caption_options_.push_back(data::CaptionOptions::from(dc));
        const data::ScannedDataset& scanned = datasets_.back();
        auto items = data::expand_items(scanned.images.size(), dc.resolution, dc.num_repeats,
                                        dc.flip_x, dc.flip_y, d, first_image);
        dataset_items_.insert(dataset_items_.end(), items.begin(), items.end());
        for (const data::ImageSize& s : scanned.sizes()) image_sizes_.push_back(s);
        first_image += scanned.images.size();
    }
    // Flat image table indexed like DatasetItem::image.
    std::vector<const data::ImageRecord*> images;
    for (const auto& ds : datasets_) {
        for (const auto& img : ds.images) images.push_back(&img);
    }
    for (const data::DatasetItem& it : dataset_items_) {
        items_.push_back({it.dataset, images.at(it.image), it});
    }
    // One batch size for the whole data order: a per-dataset override applies when the datasets
    // agree on it (ai-toolkit batches inside each dataset; loom's buckets span them). The data
    // order follows the job's batch, never the plan's micro-batch, so a plan change does not
    // change which items a step trains on.
    const int batch = process_.datasets.front().batch_size.value_or(process_.train.batch_size);
    for (const auto& dc : process_.datasets) {
        if (dc.batch_size.value_or(process_.train.batch_size) != batch) {
            log().warn("datasets ask for different batch sizes; loom uses {} for all of them",
                       batch);
            break;
        }
    }
    order_ = std::make_unique<data::DataOrder>(
        data::assign_buckets(dataset_items_, image_sizes_, divisibility_, plan().max_bucket_pixels),
        batch, seed());
    log_buckets();
    const std::string identity = process_.model.name_or_path + "|" + model_.arch;
    bool memory_latents = false;
    bool disk_latents = false;
    bool cache_text = process_.train.cache_text_embeddings;
    for (const auto& dc : process_.datasets) {
        memory_latents = memory_latents || dc.cache_latents || dc.cache_latents_to_disk;
        disk_latents = disk_latents || dc.cache_latents_to_disk;
        cache_text = cache_text || dc.cache_text_embeddings;
    }
    cache_latents_ = memory_latents;
    cache_identity_ = identity;
    cache_disk_latents_ = disk_latents;
    cache_text_ = cache_text;
    build_caches(plan());
}

// The latent and text-embedding caches as the job and the plan ask: in RAM, or — once host RAM
// ran out (host.memory_caches: false) — on disk only, next to the images and in the run folder.
// With low_vram the text encoder lives on the host, so text embeddings are always cached.
void Trainer::build_caches(const guard::Plan& p) {
    const bool in_ram = p.host.memory_caches;
    latent_cache_ = std::make_unique<data::LatentCache>(cache_identity_, cache_latents_ && in_ram,
                                                        cache_disk_latents_ || !in_ram);
    text_cache_ = make_text_cache(p);
}

std::unique_ptr<data::TextEmbeddingCache> Trainer::make_text_cache(const guard::Plan& p) const {
    const bool in_ram = p.host.memory_caches;
    return std::make_unique<data::TextEmbeddingCache>(
        cache_identity_, (cache_text_ || p.low_vram >= 1) && in_ram,
        in_ram ? std::nullopt : std::optional<fs::path>(run_.root() / "cache"));
}

void Trainer::log_buckets() const {
    for (const data::Bucket& b : order_->plan().buckets) {
        log().info("bucket {}: {} items", b.size.key(), b.items.size());
    }
}

// The cache phase: every item's latent at its bucket, encoded once before training (when the job
// caches latents). After an OOM the retry skips what is already cached.
void Trainer::cache_latents() {
    if (!cache_latents_) return;
    LowVramMode::EncodersOnDevice encoders(*low_vram_);  // once for the whole pass
    const data::BucketPlan& plan = order_->plan();
    for (std::size_t i = 0; i < items_.size(); ++i) latent_for(items_[i], plan.item_bucket.at(i));
    log().info("cached {} latents", items_.size());
}

void Trainer::attach_lora() {
    const config::NetworkConfig& n = process_.network;
    LoRANetworkOptions o;
    o.linear.rank = n.linear;
    o.linear.alpha = n.linear_alpha.value_or(n.alpha);
    o.linear.dropout = n.dropout.value_or(0.0);
    if (n.conv) o.conv = LoRAOptions{*n.conv, n.conv_alpha.value_or(*n.conv), o.linear.dropout};
    o.rules.only_if_contains = n.network_kwargs.only_if_contains;
    o.rules.ignore_if_contains = n.network_kwargs.ignore_if_contains;
    at::manual_seed(seed());  // reproducible LoRA initialisation
    network_ = std::make_unique<LoRANetwork>(LoRANetwork::inject(*model_.unet, o));
    {
        torch::NoGradGuard no_grad;
        for (const LoRATarget& t : network_->targets()) {
            t.adapter->down.set_data(device_->to_device(t.adapter->down.data()));
            t.adapter->up.set_data(device_->to_device(t.adapter->up.data()));
        }
    }
    if (n.pretrained_lora_path) load_lora(*network_, *n.pretrained_lora_path);
    network_->set_training(true);
    const config::OptimizerParams& op = process_.train.optimizer_params;
    AdamWOptions ao;
    ao.lr = process_.train.unet_lr.value_or(process_.train.lr);
    ao.beta1 = op.betas.at(0);
    ao.beta2 = op.betas.at(1);
    ao.eps = op.eps;
    ao.weight_decay = op.weight_decay;
    optimizer_ = std::make_unique<AdamW>(network_->parameters(), ao);
    schedule_ =
        make_lr_schedule(process_.train.lr_scheduler, ao.lr, process_.train.steps,
                         process_.train.lr_scheduler_params.num_warmup_steps.value_or(
                             process_.train.lr_scheduler == "constant_with_warmup" ? 1000 : 0));
    if (process_.train.ema_config.use_ema) {
        ema_ = std::make_unique<Ema>(network_->parameters(), process_.train.ema_config.ema_decay);
    }
    log().info("LoRA: {} modules, rank {}, alpha {}", network_->targets().size(), n.linear,
               o.linear.alpha);
}

void Trainer::maybe_resume() {
    if (overrides_.fresh) return;
    const auto newest = run_.newest_checkpoint();
    if (!newest) return;
    const CheckpointState s = load_checkpoint(run_.checkpoint_dir(*newest));
    const auto params = network_->parameters();
    if (s.lora.size() != params.size()) {
        throw FormatError(run_.checkpoint_dir(*newest).string(),
                          "holds " + std::to_string(s.lora.size()) +
                              " LoRA tensors but the job's "
                              "network has " +
                              std::to_string(params.size()) +
                              "; the network settings changed since it was saved (use --fresh to "
                              "start over)");
    }
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params.size(); ++i) params[i].detach().copy_(s.lora[i]);
    optimizer_->load_state(s.optimizer_steps, s.exp_avg, s.exp_avg_sq);
    if (ema_ && !s.ema.empty()) ema_->load(s.ema);
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    cpu.set_state(s.rng_cpu);
    order_->restore(data::cursor_from_json(s.data_cursor));
    step_ = s.step;
    resumed_ = true;
    log().info("resuming {} from the checkpoint at step {}", run_.root().string(), step_);
}

at::Tensor Trainer::latent_for(const TrainingItem& it, data::BucketSize bucket) {
    const auto encode = [&](const at::Tensor& image) {
        torch::NoGradGuard no_grad;
        LowVramMode::EncodersOnDevice encoders(*low_vram_);
        const at::Tensor x = device_->to_device(image.unsqueeze(0))
                                 .to(model_.vae->parameters().front().scalar_type());
        const LatentDistribution d = model_.vae->encode(x);
        // The latent sample is a function of the image alone, so cached and fresh agree.
        // content_hash is SHA-256 hex: its first 16 digits make a stable per-image seed.
        at::Generator gen = at::detail::createCPUGenerator(
            data::mix_seed(seed(), std::stoull(it.image->content_hash.substr(0, 16), nullptr, 16)));
        const at::Tensor noise = at::randn(d.mean.sizes(), gen, at::kFloat);
        at::Tensor z = d.mean.to(at::kFloat) +
                       at::exp(0.5 * d.logvar.to(at::kFloat)) * device_->to_device(noise);
        const VAEConfig& vc = model_.vae->config();
        if (vc.shift_factor) z = z - *vc.shift_factor;
        HostScope host;
        return (z * vc.scaling_factor).squeeze(0).cpu().clone();
    };
    return latent_cache_->get(*it.image, bucket, it.item.flip_x, it.item.flip_y, encode);
}

at::Tensor Trainer::context_for(const std::string& caption) {
    const auto encode = [&](const std::string& text) {
        torch::NoGradGuard no_grad;
        LowVramMode::EncodersOnDevice encoders(*low_vram_);
        const TextConditioning c = model_.encode_prompts({text});
        HostScope host;
        at::Tensor ctx = c.context.to(at::kFloat).cpu().clone();
        if (c.text_embeds.defined()) {
            // SDXL: the pooled embedding rides along as one extra token row of its own width
            // would not fit; keep it in a second slot of a list tensor instead.
            ctx = at::cat({ctx.flatten(), c.text_embeds.to(at::kFloat).cpu().flatten()});
        }
        return ctx;
    };
    return text_cache_->get(caption, encode);
}

StepWork Trainer::draw_step(std::int64_t index) {
    StepWork w;
    w.index = index;
    for (int a = 0; a < process_.train.gradient_accumulation; ++a) {
        w.batches.push_back(order_->next_batch());
    }
    w.rng_state = at::detail::getDefaultCPUGenerator().get_state();
    return w;
}

// One optimizer step over the step's items, cut into micro-batches of the plan's batch size.
// The update runs only after every micro-batch succeeded, so an OOM never leaves a half-applied
// step; a retry starts again from the same items and the same RNG state.
double Trainer::train_step(const StepWork& work) {
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    cpu.set_state(work.rng_state);
    const std::vector<data::MicroBatch> micro =
        data::split_micro_batches(work.batches, order_->plan(), plan().batch_size);
    std::size_t total = 0;
    for (const auto& m : micro) total += m.slots.size();
    step_times_ = {};
    optimizer_->zero_grad();
    at::Tensor loss;
    for (const data::MicroBatch& m : micro) {
        guard_->note_bucket(m.bucket.width, m.bucket.height);
        const at::Tensor part = forward_backward(m, work.batches, work.index, total);
        loss = loss.defined() ? loss + part : part;
    }
    PhaseTimer timer(step_times_.optimizer);
    if (process_.train.max_grad_norm > 0) optimizer_->clip_grad_norm(process_.train.max_grad_norm);
    optimizer_->step(schedule_.lr_at(work.index));
    optimizer_->zero_grad();
    if (ema_) ema_->update(network_->parameters());
    // The step's one read-back (a device sync), not one per micro-batch.
    return loss.item<double>();
}

// Forward and backward of one micro-batch; its loss is weighted by its share of the step's
// items, so the accumulated gradient is the step's mean whatever the split. Every random draw
// is a function of (seed, step, slot): a slot gets the same noise in any micro-batch. Returns
// the weighted loss, detached, on the device.
at::Tensor Trainer::forward_backward(const data::MicroBatch& micro,
                                     const std::vector<data::Batch>& batches,
                                     std::int64_t step_index, std::size_t step_items) {
    std::optional<PhaseTimer> phase(std::in_place, step_times_.data);
    const std::uint64_t s = seed();
    const auto step_seed = static_cast<std::uint64_t>(step_index);
    const bool sdxl = static_cast<bool>(model_.text_encoder_2);
    const int64_t context_tokens = 77;
    const int64_t context_width = model_.unet->config().cross_attention_dim.front();
    std::vector<at::Tensor> latents;
    std::vector<at::Tensor> contexts;
    std::vector<at::Tensor> pooled;
    for (const data::StepSlot& slot : micro.slots) {
        const TrainingItem& it = items_.at(slot.item);
        latents.push_back(latent_for(it, micro.bucket));
        data::Rng rng = batches.at(slot.batch).slot_rng(s, slot.k);
        const std::string caption =
            data::process_caption(it.image->caption, caption_options_.at(it.dataset), rng);
        at::Tensor ctx = context_for(caption);
        if (sdxl) {
            const int64_t n = context_tokens * context_width;
            pooled.push_back(ctx.slice(0, n));
            ctx = ctx.slice(0, 0, n).view({context_tokens, context_width});
        }
        contexts.push_back(ctx);
    }
    const at::Tensor x0 = device_->to_device(at::stack(latents));
    const at::Tensor context =
        device_->to_device(at::stack(contexts)).to(model_.unet->parameters().front().scalar_type());
    std::vector<at::Tensor> noise;
    std::vector<at::Tensor> offsets;
    std::vector<int64_t> timesteps;
    for (const data::StepSlot& slot : micro.slots) {
        at::Generator gen = at::detail::createCPUGenerator(data::mix_seed(s, step_seed, slot.slot));
        noise.push_back(at::randn(x0.sizes().slice(1), gen, at::kFloat));
        const int64_t lo = process_.train.min_denoising_steps;
        const int64_t hi = process_.train.max_denoising_steps;
        const double u = at::rand({1}, gen, at::kDouble).item<double>();
        double shaped = u;
        if (process_.train.content_or_style == "content") shaped = u * u * u;
        if (process_.train.content_or_style == "style") shaped = 1.0 - u * u * u;
        timesteps.push_back(std::min(hi, lo + static_cast<int64_t>(shaped * (hi - lo + 1))));
        if (process_.train.noise_offset > 0) {
            at::Generator off =
                at::detail::createCPUGenerator(data::mix_seed(s, step_seed, 1000003 + slot.slot));
            offsets.push_back(at::randn({x0.size(1), 1, 1}, off, at::kFloat));
        }
    }
    at::Tensor eps = device_->to_device(at::stack(noise));
    if (!offsets.empty()) {
        eps = eps + process_.train.noise_offset * device_->to_device(at::stack(offsets));
    }
    const at::Tensor t = device_->to_device(at::tensor(timesteps, at::kLong));
    const at::Tensor noisy = noise_schedule_.add_noise(x0, eps, t);
    const at::Tensor target = noise_schedule_.target(x0, eps, t);
    at::Tensor text_embeds;
    at::Tensor time_ids;
    if (sdxl) {
        text_embeds = device_->to_device(at::stack(pooled)).to(context.scalar_type());
        time_ids = device_->to_device(
            StableDiffusion::time_ids(micro.bucket.height, micro.bucket.width, x0.size(0)));
    }
    phase.emplace(step_times_.forward);
    const at::Tensor pred =
        model_.unet->forward(noisy.to(context.scalar_type()), t, context, text_embeds, time_ids);
    const at::Tensor loss = process_.train.loss_type == "mae"
                                ? (pred.to(at::kFloat) - target).abs().mean()
                                : (pred.to(at::kFloat) - target).pow(2).mean();
    const double weight = static_cast<double>(micro.slots.size()) / static_cast<double>(step_items);
    const at::Tensor weighted = loss * weight;
    phase.emplace(step_times_.backward);
    weighted.backward();
    return weighted.detach();
}

// One forward+backward at the worst case under `p`: the largest active bucket, a full
// micro-batch. No optimizer update; the gradients go back to undefined. Returns the bucket.
std::string Trainer::probe_training(const guard::Plan& p) {
    const data::Bucket* largest = order_->plan().largest();
    data::Batch b;
    b.bucket = largest->size;
    for (int k = 0; k < p.batch_size; ++k) {
        b.items.push_back(largest->items.at(std::size_t(k) % largest->items.size()));
    }
    const std::vector<data::MicroBatch> micro =
        data::split_micro_batches({b}, order_->plan(), p.batch_size);
    optimizer_->zero_grad();
    guard_->note_bucket(micro.front().bucket.width, micro.front().bucket.height);
    forward_backward(micro.front(), {b}, /*step_index=*/0, micro.front().slots.size());
    optimizer_->zero_grad();
    return b.bucket.key();
}

// One sampling pass under `p`'s sampling knobs: every preview with a single denoising step,
// which has the full sampling peak (the UNet pass and the VAE decode).
void Trainer::probe_sampling(const guard::Plan& p) {
    if (!p.sample.enabled) return;
    std::vector<PreviewRequest> requests = preview_requests();
    for (PreviewRequest& r : requests) r.steps = 1;
    render_previews(std::move(requests), p.sample);
}

// The preflight probe: before step 1, the worst-case training step and one sampling pass at the
// configured preview size, with the RNG restored. Its OOMs go through the ladder at no training
// cost.
void Trainer::probe() {
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    const at::Tensor rng_state = cpu.get_state();
    const int oom_before = guard_->oom_count();
    std::string bucket;
    guard_->run(
        Phase::kProbe, std::nullopt, [&] { bucket = probe_training(plan()); }, guard::Work::kTrain);
    cpu.set_state(rng_state);
    const std::uint64_t train_peak = device_->stats().peak_allocated;
    events_->record("probe", {{"part", "train"},
                              {"result", "fits"},
                              {"bucket", bucket},
                              {"batch_size", plan().batch_size},
                              {"peak", train_peak},
                              {"ooms", guard_->oom_count() - oom_before},
                              {"plan", guard::describe(plan())}});
    log().info("probe: a training step at {} x {} fits (peak {})", bucket, plan().batch_size,
               format_bytes_human(train_peak));
    if (!plan().sample.enabled) return;
    const int sample_ooms_before = guard_->oom_count();
    guard_->run(
        Phase::kProbe, std::nullopt, [&] { probe_sampling(plan()); }, guard::Work::kSample);
    cpu.set_state(rng_state);
    events_->record("probe", {{"part", "sample"},
                              {"result", plan().sample.enabled ? "fits" : "disabled"},
                              {"peak", device_->stats().peak_allocated},
                              {"ooms", guard_->oom_count() - sample_ooms_before},
                              {"plan", guard::describe(plan())}});
}

// Scale-up's check of a candidate plan: the same probe, unguarded (an OOM pins the change).
void Trainer::probe_candidate(const guard::Plan& candidate) {
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    const at::Tensor rng_state = cpu.get_state();
    struct RestoreRng {
        at::Generator& gen;
        const at::Tensor& state;
        ~RestoreRng() { gen.set_state(state); }
    } restore{cpu, rng_state};
    probe_training(candidate);
    probe_sampling(candidate);
}

SafetensorsMetadata Trainer::lora_metadata(std::int64_t step) const {
    const config::NetworkConfig& n = process_.network;
    SafetensorsMetadata m;
    for (const auto& [k, v] : job_.meta) m.emplace_back(k, v);
    m.emplace_back("training_info", nlohmann::json{{"step", step}}.dump());
    m.emplace_back("software", nlohmann::json{{"name", "loom"}, {"version", kVersion}}.dump());
    m.emplace_back("ss_output_name", *process_.name);
    m.emplace_back("ss_network_module", "networks.lora");
    m.emplace_back("ss_network_dim", std::to_string(n.linear));
    m.emplace_back("ss_network_alpha", std::to_string(n.linear_alpha.value_or(n.alpha)));
    m.emplace_back("ss_base_model_version", model_.arch == "sdxl" ? "sdxl_base_v1-0" : "sd_v1");
    m.emplace_back("ss_learning_rate", std::to_string(process_.train.lr));
    m.emplace_back("ss_lr_scheduler", process_.train.lr_scheduler);
    m.emplace_back("ss_max_train_steps", std::to_string(process_.train.steps));
    m.emplace_back("ss_steps", std::to_string(step));
    m.emplace_back("ss_seed", std::to_string(seed()));
    m.emplace_back("ss_gradient_checkpointing", plan().gradient_checkpointing ? "True" : "False");
    m.emplace_back("ss_gradient_accumulation_steps",
                   std::to_string(process_.train.gradient_accumulation));
    m.emplace_back("ss_optimizer", "AdamW");
    m.emplace_back("ss_max_grad_norm", std::to_string(process_.train.max_grad_norm));
    m.emplace_back("ss_noise_offset", std::to_string(process_.train.noise_offset));
    m.emplace_back("ss_sd_model_name", process_.model.name_or_path);
    return m;
}

void Trainer::save(std::int64_t step, bool final) {
    const auto params = network_->parameters();
    const fs::path file = final ? run_.final_lora() : run_.step_lora(step);
    {
        EmaSwap ema(ema_.get(), params);  // files hold the EMA weights, as ai-toolkit saves them
        save_lora(*network_, file, parse_lora_layout(process_.save.format),
                  save_dtype(process_.save.dtype), lora_metadata(step));
    }
    if (!final) {
        CheckpointState s;
        s.step = step;
        s.optimizer_steps = optimizer_->steps_taken();
        for (const auto& p : params) s.lora.push_back(p.detach().cpu());
        for (const auto& t : optimizer_->exp_avg()) s.exp_avg.push_back(t.cpu());
        for (const auto& t : optimizer_->exp_avg_sq()) s.exp_avg_sq.push_back(t.cpu());
        if (ema_) {
            for (const auto& t : ema_->shadow()) s.ema.push_back(t.cpu());
        }
        s.rng_cpu = at::detail::getDefaultCPUGenerator().get_state();
        s.data_cursor = data::cursor_to_json(order_->cursor());
        s.plan_yaml = guard::plan_to_yaml(plan());
        save_checkpoint(run_.checkpoint_dir(step), s);
        run_.prune(static_cast<std::size_t>(process_.save.max_step_saves_to_keep));
    }
    events_->record("save", {{"step", step}, {"file", file.string()}, {"final", final}});
    log().info("saved {}", file.string());
}

// The job's previews as requests: legacy `prompts` then `samples[]` items, "[trigger]" filled in.
std::vector<PreviewRequest> Trainer::preview_requests() const {
    const config::SampleConfig& sc = process_.sample;
    std::vector<PreviewRequest> requests;
    std::vector<std::string> prompts = sc.prompts;
    for (const auto& item : sc.samples) prompts.push_back(item.prompt);
    const std::optional<std::string>& trigger = process_.trigger_word;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        PreviewRequest r;
        std::string p = prompts[i];
        for (std::size_t pos = p.find("[trigger]"); pos != std::string::npos;
             pos = p.find("[trigger]")) {
            p.replace(pos, 9, trigger.value_or(""));
        }
        r.prompt = p;
        r.negative = sc.neg;
        r.seed = sc.walk_seed ? sc.seed + static_cast<int64_t>(i) : sc.seed;
        r.width = sc.width;
        r.height = sc.height;
        r.steps = sc.sample_steps;
        r.guidance_scale = sc.guidance_scale;
        const std::size_t legacy = sc.prompts.size();
        if (i >= legacy) {
            const config::SampleItem& item = sc.samples[i - legacy];
            if (item.width) r.width = *item.width;
            if (item.height) r.height = *item.height;
            if (item.neg) r.negative = *item.neg;
            if (item.seed) r.seed = *item.seed;
            if (item.guidance_scale) r.guidance_scale = *item.guidance_scale;
            if (item.sample_steps) r.steps = *item.sample_steps;
        }
        requests.push_back(r);
    }
    return requests;
}

// Runs the previews under the plan's sampling knobs (size cap, batching) with the EMA weights
// and the LoRA at the sampling multiplier; the trainer's state is restored even on an OOM.
std::vector<at::Tensor> Trainer::render_previews(std::vector<PreviewRequest> requests,
                                                 const guard::SamplePlan& sp) {
    for (PreviewRequest& r : requests) {
        r.width = std::min<int64_t>(r.width, sp.width);
        r.height = std::min<int64_t>(r.height, sp.height);
    }
    PreviewOptions options;
    options.sampler = process_.sample.sampler;
    options.batch_prompts = sp.batch_prompts;
    options.batch_guidance = sp.batch_guidance;
    struct PreviewMode {
        LoRANetwork& network;
        PreviewMode(LoRANetwork& n, double multiplier) : network(n) {
            network.set_training(false);
            network.set_multiplier(multiplier);
        }
        ~PreviewMode() {
            network.set_multiplier(1.0);
            network.set_training(true);
        }
    } mode(*network_, process_.sample.network_multiplier);
    EmaSwap ema(ema_.get(), network_->parameters());
    LowVramMode::EncodersOnDevice encoders(*low_vram_);
    return generate_previews(model_, requests, options, device_->torch_device());
}

void Trainer::sample(std::int64_t step) {
    if (!plan().sample.enabled) return;
    std::vector<PreviewRequest> requests = preview_requests();
    if (requests.empty()) return;
    const std::vector<at::Tensor> images = render_previews(std::move(requests), plan().sample);
    const std::string time = iso_now_ms();
    std::vector<data::Image> grid;
    for (std::size_t i = 0; i < images.size(); ++i) {
        const at::Tensor& t = images[i];
        data::Image img(static_cast<int>(t.size(1)), static_cast<int>(t.size(0)));
        std::memcpy(img.pixels.data(), t.data_ptr(), img.pixels.size());
        data::write_png(run_.samples_dir() /
                            (time + "__" + step_label(step) + "_" + std::to_string(i) + ".png"),
                        img);
        grid.push_back(std::move(img));
    }
    data::write_png(run_.samples_dir() / (time + "__" + step_label(step) + "_grid.png"),
                    data::image_grid(grid, 0, 2));
    guard_->sample_ran();
    log().info("wrote {} samples at step {}", images.size(), step);
}

void Trainer::write_metrics(std::int64_t step, double loss, double lr, double seconds,
                            const std::vector<std::string>& buckets) {
    const MemoryStats m = device_->stats();
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const nlohmann::json line = {{"step", step},
                                 {"time", now},
                                 {"loss", loss},
                                 {"lr", lr},
                                 {"step_seconds", seconds},
                                 {"buckets", buckets},
                                 {"allocated", m.allocated},
                                 {"peak_allocated", m.peak_allocated},
                                 {"phases",
                                  {{"data", step_times_.data},
                                   {"forward", step_times_.forward},
                                   {"backward", step_times_.backward},
                                   {"optimizer", step_times_.optimizer}}}};
    if (!metrics_out_.is_open()) metrics_out_.open(run_.metrics_jsonl(), std::ios::app);
    metrics_out_ << line.dump() << "\n";
    metrics_out_.flush();  // a killed run keeps every finished step's line
}

void Trainer::finish_summary(TrainSummary& summary) const {
    summary.end_step = step_;
    summary.ooms = guard_->oom_count();
    summary.plan_changes = guard_->change_count();
    summary.final_plan = guard::describe(plan());
    summary.reused_stable_id = reused_stable_id_;
}

void Trainer::record_end(const std::string& status) {
    if (store_ == nullptr) return;
    store_->run_finished(
        {status, step_, guard_ ? guard_->oom_count() : 0, guard_ ? plan() : guard::Plan{}});
    store_ = nullptr;  // one end per run
}

void Trainer::record_failure() noexcept {
    try {
        record_end("failed");
    } catch (...) {
        // The run's own error is what the user must see; the store reports its problems itself.
    }
}

TrainSummary Trainer::run() {
    TrainSummary summary;
    if (overrides_.fresh) set_aside_old_state();
    run_.create();
    add_log_file(run_.log_file());
    write_file_atomic(run_.config_yaml(), config::emit_job_yaml(job_));
    log().info("loom {} — run folder {}", kVersion, run_.root().string());
    events_ = std::make_unique<guard::EventLog>(run_.events_jsonl());
    open_device();
    if (overrides_.plan_store != nullptr) key_ = plan_key();
    guard::GuardOptions options;
    options.enabled = process_.oom.enabled;
    options.context = policy_context();
    options.plan_file = run_.plan_yaml();
    options.stable_file = run_.stable_yaml();
    options.stable_after = process_.oom.stable_after;
    options.scale_up = process_.oom.scale_up;
    options.store = key_ ? overrides_.plan_store : nullptr;
    guard_ = std::make_unique<guard::Guard>(*device_, initial_plan(), options, *events_);
    guard_->set_target(this);
    if (plan().host.threads > 0) at::set_num_threads(plan().host.threads);
    guard::save_plan(run_.plan_yaml(), plan());
    events_->record("start", {{"device", device_->description()},
                              {"total", device_->stats().total},
                              {"plan", guard::describe(plan())},
                              {"fresh", overrides_.fresh}});
    if (key_) {
        overrides_.plan_store->run_started({*key_, *process_.name,
                                            fs::absolute(run_.root()).string(),
                                            config::emit_job_yaml(job_), index_, plan()});
        store_ = overrides_.plan_store;
    }
    guard_->check_device_clean();
    guard_->run(Phase::kLoad, std::nullopt, [&] {
        network_.reset();
        optimizer_.reset();
        ema_.reset();
        load_model();
        attach_lora();
    });
    prepare_data();
    maybe_resume();
    guard_->run(Phase::kCache, std::nullopt, [&] { cache_latents(); });
    summary.run_folder = run_.root();
    summary.resumed = resumed_;
    summary.start_step = step_;

    const config::TrainConfig& tc = process_.train;
    const config::SampleConfig& sc = process_.sample;
    if (process_.oom.probe && step_ < tc.steps) probe();
    if ((step_ == 0 && !tc.skip_first_sample) || tc.force_first_sample) {
        guard_->run(Phase::kFirstSample, std::nullopt, [&] { sample(step_); });
    }
    const bool tty = overrides_.progress_line && ::isatty(STDERR_FILENO);
    const auto started = std::chrono::steady_clock::now();
    std::int64_t ran = 0;
    while (step_ < tc.steps) {
        const auto t0 = std::chrono::steady_clock::now();
        const double lr = schedule_.lr_at(step_);
        const StepWork work = draw_step(step_);
        double loss = 0.0;
        guard_->run(Phase::kTrainStep, step_ + 1, [&] { loss = train_step(work); });
        ++step_;
        ++ran;
        guard_->step_succeeded(step_);
        guard_->maybe_scale_up(step_, [&](const guard::Plan& p) { probe_candidate(p); });
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        summary.losses.push_back(loss);
        std::vector<std::string> buckets;
        for (const data::Batch& b : work.batches) buckets.push_back(b.bucket.key());
        write_metrics(step_, loss, lr, seconds, buckets);
        const double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        const double rate = static_cast<double>(ran) / std::max(elapsed, 1e-9);
        const std::string line =
            format("step {}/{} loss {:.4f} lr {:.2e} {:.2f} it/s mem {} ETA {}", step_, tc.steps,
                   loss, lr, rate, format_bytes_human(device_->stats().allocated),
                   format_eta(static_cast<double>(tc.steps - step_) / std::max(rate, 1e-9)));
        if (tty) {
            std::fprintf(stderr, "\r%s   ", line.c_str());
            if (step_ == tc.steps) std::fprintf(stderr, "\n");
        } else if (step_ % std::max(1, process_.logging.log_every) == 0 || step_ == tc.steps ||
                   ran == 1) {
            log().info("{}", line);
        }
        if (overrides_.stop_after_steps && ran >= *overrides_.stop_after_steps) {
            finish_summary(summary);
            record_end("stopped");
            return summary;  // as if killed: no final save
        }
        const bool stop = overrides_.stop_requested != nullptr && overrides_.stop_requested->load();
        if (step_ < tc.steps && (step_ % process_.save.save_every == 0 || stop)) {
            guard_->run(Phase::kSave, step_, [&] { save(step_, false); });
        }
        if (stop && step_ < tc.steps) {
            log().warn("stopped at step {} on request; checkpoint saved, rerun the job to resume",
                       step_);
            events_->record("interrupted", {{"step", step_}});
            finish_summary(summary);
            summary.interrupted = true;
            record_end("interrupted");
            close_log_files();
            return summary;
        }
        if (step_ < tc.steps && step_ >= sc.sample_start_step && step_ % sc.sample_every == 0 &&
            plan().sample.enabled) {
            guard_->run(Phase::kSample, step_, [&] { sample(step_); });
        }
    }
    // The last checkpoint: a rerun of a finished job resumes at the end.
    guard_->run(Phase::kSave, step_, [&] { save(step_, false); });
    guard_->run(Phase::kSave, step_, [&] { save(step_, true); });
    guard_->run(Phase::kSample, step_, [&] { sample(step_); });
    guard_->finish(step_);
    finish_summary(summary);
    summary.final_lora = run_.final_lora();
    record_end("completed");
    log().info("done: {} (LoRA {}, samples {}, events {}, plan {}{})", run_.root().string(),
               run_.final_lora().string(), run_.samples_dir().string(),
               run_.events_jsonl().string(), run_.plan_yaml().string(),
               fs::exists(run_.stable_yaml()) ? ", stable plan " + run_.stable_yaml().string()
                                              : std::string());
    if (guard_->oom_count() > 0) {
        log().info(
            "{} out-of-memory errors recovered with {} plan changes, 0 steps lost; "
            "final plan: {}",
            guard_->oom_count(), guard_->change_count(), guard::describe(plan()));
    }
    close_log_files();
    return summary;
}

}  // namespace

TrainSummary train_process(const config::Job& job, std::size_t index,
                           const TrainOverrides& overrides) {
    Trainer trainer(job, index, overrides);
    try {
        return trainer.run();
    } catch (...) {
        trainer.record_failure();
        close_log_files();  // the run folder's loom.log has the error's lead-up; release it
        throw;
    }
}

}  // namespace loom
