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
#include "loom/data/tensor_cache.h"
#include "loom/device/device.h"
#include "loom/device/sim_allocator.h"
#include "loom/io/atomic_file.h"
#include "loom/lora/lora_file.h"
#include "loom/lora/lora_network.h"
#include "loom/model/stable_diffusion.h"
#include "loom/train/adamw.h"
#include "loom/train/checkpoint_state.h"
#include "loom/train/ema.h"
#include "loom/train/lr_schedule.h"
#include "loom/train/preview_sampler.h"
#include "loom/train/run_folder.h"

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

// Moves every parameter and buffer of `module` to `device` (device-resident on sim).
void place(torch::nn::Module& module, Device& device) {
    torch::NoGradGuard no_grad;
    for (auto& p : module.parameters()) p.set_data(device.to_device(p.data()));
    for (auto& b : module.buffers()) b.set_data(device.to_device(b.data()));
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

class Trainer {
  public:
    Trainer(const config::Job& job, std::size_t index, const TrainOverrides& overrides)
        : job_(job),
          process_(job.config.process.at(index)),
          overrides_(overrides),
          run_(*process_.training_folder, *process_.name) {}

    TrainSummary run();

  private:
    void open_device();
    void load_model();
    void prepare_data();
    void attach_lora();
    void maybe_resume();
    double train_step(std::int64_t step);
    at::Tensor latent_for(const TrainingItem& item, data::BucketSize bucket);
    at::Tensor context_for(const std::string& caption);
    void save(std::int64_t step, bool final);
    void sample(std::int64_t step);
    void write_metrics(std::int64_t step, double loss, double lr, double seconds);
    SafetensorsMetadata lora_metadata(std::int64_t step) const;
    std::uint64_t seed() const {
        return static_cast<std::uint64_t>(process_.training_seed.value_or(0));
    }

    const config::Job& job_;
    const config::ProcessConfig& process_;
    TrainOverrides overrides_;
    RunFolder run_;
    std::unique_ptr<Device> device_;
    StableDiffusion model_;
    std::vector<data::ScannedDataset> datasets_;
    std::vector<data::CaptionOptions> caption_options_;
    std::vector<TrainingItem> items_;
    std::unique_ptr<data::DataOrder> order_;
    std::unique_ptr<data::LatentCache> latent_cache_;
    std::unique_ptr<data::TextEmbeddingCache> text_cache_;
    std::unique_ptr<LoRANetwork> network_;
    std::unique_ptr<AdamW> optimizer_;
    std::unique_ptr<Ema> ema_;
    LrSchedule schedule_;
    NoiseSchedule noise_schedule_;
    std::int64_t step_ = 0;
    bool resumed_ = false;
};

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
    model_ = load_stable_diffusion(process_.model.name_or_path, options);
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
        place(*m, *device_);
    }
    model_.unet->set_gradient_checkpointing(process_.train.gradient_checkpointing);
    log().info("model: {} ({}), device memory after load: {}", process_.model.name_or_path,
               model_.arch, device_->stats().to_string());
}

void Trainer::prepare_data() {
    const int divisibility = static_cast<int>(find_arch_spec(model_.arch)->bucket_divisibility);
    std::vector<data::DatasetItem> all_items;
    std::vector<data::ImageSize> sizes;
    std::size_t first_image = 0;
    for (std::size_t d = 0; d < process_.datasets.size(); ++d) {
        const config::DatasetConfig& dc = process_.datasets[d];
        datasets_.push_back(data::scan_dataset(dc));
        caption_options_.push_back(data::CaptionOptions::from(dc));
        const data::ScannedDataset& scanned = datasets_.back();
        auto items = data::expand_items(scanned.images.size(), dc.resolution, dc.num_repeats,
                                        dc.flip_x, dc.flip_y, d, first_image);
        all_items.insert(all_items.end(), items.begin(), items.end());
        for (const data::ImageSize& s : scanned.sizes()) sizes.push_back(s);
        first_image += scanned.images.size();
    }
    // Flat image table indexed like DatasetItem::image.
    std::vector<const data::ImageRecord*> images;
    for (const auto& ds : datasets_) {
        for (const auto& img : ds.images) images.push_back(&img);
    }
    for (const data::DatasetItem& it : all_items) {
        items_.push_back({it.dataset, images.at(it.image), it});
    }
    data::BucketPlan plan = data::assign_buckets(all_items, sizes, divisibility);
    for (const data::Bucket& b : plan.buckets) {
        log().info("bucket {}: {} items", b.size.key(), b.items.size());
    }
    // One batch size for the whole data order: a per-dataset override applies when the datasets
    // agree on it (ai-toolkit batches inside each dataset; loom's buckets span them).
    const int batch = process_.datasets.front().batch_size.value_or(process_.train.batch_size);
    for (const auto& dc : process_.datasets) {
        if (dc.batch_size.value_or(process_.train.batch_size) != batch) {
            log().warn("datasets ask for different batch sizes; loom uses {} for all of them",
                       batch);
            break;
        }
    }
    order_ = std::make_unique<data::DataOrder>(std::move(plan), batch, seed());
    const std::string identity = process_.model.name_or_path + "|" + model_.arch;
    bool memory_latents = false;
    bool disk_latents = false;
    bool cache_text = process_.train.cache_text_embeddings;
    for (const auto& dc : process_.datasets) {
        memory_latents = memory_latents || dc.cache_latents || dc.cache_latents_to_disk;
        disk_latents = disk_latents || dc.cache_latents_to_disk;
        cache_text = cache_text || dc.cache_text_embeddings;
    }
    latent_cache_ = std::make_unique<data::LatentCache>(identity, memory_latents, disk_latents);
    text_cache_ = std::make_unique<data::TextEmbeddingCache>(identity, cache_text, std::nullopt);
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

double Trainer::train_step(std::int64_t step) {
    const int accumulation = process_.train.gradient_accumulation;
    const std::uint64_t s = seed();
    std::vector<data::Batch> batches;
    for (int a = 0; a < accumulation; ++a) batches.push_back(order_->next_batch());
    std::size_t total = 0;
    for (const auto& b : batches) total += b.items.size();

    optimizer_->zero_grad();
    double loss_sum = 0.0;
    std::size_t slot_base = 0;
    const bool sdxl = static_cast<bool>(model_.text_encoder_2);
    const int64_t context_tokens = 77;
    const int64_t context_width = model_.unet->config().cross_attention_dim.front();
    for (const data::Batch& batch : batches) {
        std::vector<at::Tensor> latents;
        std::vector<at::Tensor> contexts;
        std::vector<at::Tensor> pooled;
        for (std::size_t k = 0; k < batch.items.size(); ++k) {
            const TrainingItem& it = items_.at(batch.items[k]);
            latents.push_back(latent_for(it, batch.bucket));
            data::Rng rng = batch.slot_rng(s, k);
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
        const at::Tensor context = device_->to_device(at::stack(contexts))
                                       .to(model_.unet->parameters().front().scalar_type());
        // Noise and timestep per slot, from (seed, step, slot) only.
        std::vector<at::Tensor> noise;
        std::vector<int64_t> timesteps;
        for (std::size_t k = 0; k < batch.items.size(); ++k) {
            at::Generator gen = at::detail::createCPUGenerator(
                data::mix_seed(s, static_cast<std::uint64_t>(step), slot_base + k));
            noise.push_back(at::randn(x0.sizes().slice(1), gen, at::kFloat));
            const int64_t lo = process_.train.min_denoising_steps;
            const int64_t hi = process_.train.max_denoising_steps;
            const double u = at::rand({1}, gen, at::kDouble).item<double>();
            double shaped = u;
            if (process_.train.content_or_style == "content") shaped = u * u * u;
            if (process_.train.content_or_style == "style") shaped = 1.0 - u * u * u;
            timesteps.push_back(std::min(hi, lo + static_cast<int64_t>(shaped * (hi - lo + 1))));
        }
        at::Tensor eps = device_->to_device(at::stack(noise));
        if (process_.train.noise_offset > 0) {
            at::Generator gen = at::detail::createCPUGenerator(
                data::mix_seed(s, static_cast<std::uint64_t>(step), 1000003 + slot_base));
            eps = eps + process_.train.noise_offset *
                            device_->to_device(
                                at::randn({x0.size(0), x0.size(1), 1, 1}, gen, at::kFloat));
        }
        const at::Tensor t = device_->to_device(at::tensor(timesteps, at::kLong));
        const at::Tensor noisy = noise_schedule_.add_noise(x0, eps, t);
        const at::Tensor target = noise_schedule_.target(x0, eps, t);
        at::Tensor text_embeds;
        at::Tensor time_ids;
        if (sdxl) {
            text_embeds = device_->to_device(at::stack(pooled)).to(context.scalar_type());
            time_ids = device_->to_device(
                StableDiffusion::time_ids(batch.bucket.height, batch.bucket.width, x0.size(0)));
        }
        const at::Tensor pred = model_.unet->forward(noisy.to(context.scalar_type()), t, context,
                                                     text_embeds, time_ids);
        at::Tensor loss = process_.train.loss_type == "mae"
                              ? (pred.to(at::kFloat) - target).abs().mean()
                              : (pred.to(at::kFloat) - target).pow(2).mean();
        const double weight = static_cast<double>(batch.items.size()) / static_cast<double>(total);
        (loss * weight).backward();
        loss_sum += loss.item<double>() * weight;
        slot_base += batch.items.size();
    }
    if (process_.train.max_grad_norm > 0) optimizer_->clip_grad_norm(process_.train.max_grad_norm);
    optimizer_->step(schedule_.lr_at(step));
    optimizer_->zero_grad();
    if (ema_) ema_->update(network_->parameters());
    return loss_sum;
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
    m.emplace_back("ss_gradient_checkpointing",
                   process_.train.gradient_checkpointing ? "True" : "False");
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
    if (ema_) ema_->swap(params);  // files hold the EMA weights, as ai-toolkit saves them
    const fs::path file = final ? run_.final_lora() : run_.step_lora(step);
    save_lora(*network_, file, parse_lora_layout(process_.save.format),
              save_dtype(process_.save.dtype), lora_metadata(step));
    if (ema_) ema_->swap(params);
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
        save_checkpoint(run_.checkpoint_dir(step), s);
        run_.prune(static_cast<std::size_t>(process_.save.max_step_saves_to_keep));
    }
    log().info("saved {}", file.string());
}

void Trainer::sample(std::int64_t step) {
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
    if (requests.empty()) return;
    network_->set_training(false);
    network_->set_multiplier(sc.network_multiplier);
    const auto params = network_->parameters();
    if (ema_) ema_->swap(params);
    PreviewOptions options;
    options.sampler = sc.sampler;
    std::vector<at::Tensor> images;
    try {
        images = generate_previews(model_, requests, options, device_->torch_device());
    } catch (...) {
        if (ema_) ema_->swap(params);
        network_->set_multiplier(1.0);
        network_->set_training(true);
        throw;
    }
    if (ema_) ema_->swap(params);
    network_->set_multiplier(1.0);
    network_->set_training(true);
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
    log().info("wrote {} samples at step {}", images.size(), step);
}

void Trainer::write_metrics(std::int64_t step, double loss, double lr, double seconds) {
    const MemoryStats m = device_->stats();
    const nlohmann::json line = {{"step", step},
                                 {"loss", loss},
                                 {"lr", lr},
                                 {"step_seconds", seconds},
                                 {"allocated", m.allocated},
                                 {"peak_allocated", m.peak_allocated}};
    std::ofstream out(run_.metrics_jsonl(), std::ios::app);
    out << line.dump() << "\n";
}

TrainSummary Trainer::run() {
    TrainSummary summary;
    run_.create();
    add_log_file(run_.log_file());
    write_file_atomic(run_.config_yaml(), config::emit_job_yaml(job_));
    log().info("loom {} — run folder {}", kVersion, run_.root().string());
    open_device();
    load_model();
    prepare_data();
    attach_lora();
    maybe_resume();
    summary.run_folder = run_.root();
    summary.resumed = resumed_;
    summary.start_step = step_;

    const config::TrainConfig& tc = process_.train;
    const config::SampleConfig& sc = process_.sample;
    const bool sampling = !tc.disable_sampling;
    if (sampling && ((step_ == 0 && !tc.skip_first_sample) || tc.force_first_sample)) {
        sample(step_);
    }
    const bool tty = overrides_.progress_line && ::isatty(STDERR_FILENO);
    const auto started = std::chrono::steady_clock::now();
    std::int64_t ran = 0;
    while (step_ < tc.steps) {
        const auto t0 = std::chrono::steady_clock::now();
        const double lr = schedule_.lr_at(step_);
        const double loss = train_step(step_);
        ++step_;
        ++ran;
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        summary.losses.push_back(loss);
        write_metrics(step_, loss, lr, seconds);
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
            summary.end_step = step_;
            return summary;  // as if killed: no final save
        }
        if (step_ < tc.steps && step_ % process_.save.save_every == 0) save(step_, false);
        if (sampling && step_ < tc.steps && step_ >= sc.sample_start_step &&
            step_ % sc.sample_every == 0) {
            sample(step_);
        }
    }
    save(step_, false);  // the last checkpoint: a rerun of a finished job resumes at the end
    save(step_, true);
    if (sampling) sample(step_);
    summary.end_step = step_;
    summary.final_lora = run_.final_lora();
    log().info("done: {} (LoRA {}, samples {}, metrics {})", run_.root().string(),
               run_.final_lora().string(), run_.samples_dir().string(),
               run_.metrics_jsonl().string());
    close_log_files();
    return summary;
}

}  // namespace

TrainSummary train_process(const config::Job& job, std::size_t index,
                           const TrainOverrides& overrides) {
    Trainer trainer(job, index, overrides);
    return trainer.run();
}

}  // namespace loom
