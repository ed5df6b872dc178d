#include "loom/train/training_data.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>
#include <map>

#include "loom/core/error.h"
#include "loom/core/logging.h"
#include "loom/data/image.h"
#include "loom/data/image_tensor.h"
#include "loom/data/rng.h"
#include "train_log.h"

namespace loom {

TrainingData::TrainingData(const config::ProcessConfig& process, ModelFacts model,
                           const guard::Plan& plan, std::filesystem::path run_root,
                           std::uint64_t seed, int ranks)
    : divisibility_(model.divisibility),
      controls_in_prompt_(model.controls_in_prompt),
      control_size_(std::move(model.control_size)),
      control_dropout_(process.model.model_kwargs.control_dropout),
      inpaint_dropout_(process.model.model_kwargs.inpaint_dropout),
      invert_inpaint_chance_(process.model.model_kwargs.invert_inpaint_mask_chance),
      cache_identity_(std::move(model.identity)),
      run_root_(std::move(run_root)) {
    std::size_t first_image = 0;
    for (std::size_t d = 0; d < process.datasets.size(); ++d) {
        const config::DatasetConfig& dc = process.datasets[d];
        datasets_.push_back(data::scan_dataset(dc));
        caption_options_.push_back(data::CaptionOptions::from(dc));
        clip_sampling_.push_back(data::ClipSampling::from(dc, model.temporal_compression));
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
    // Paired datasets (control_path, inpaint_path) and plain ones cannot share a batch: a
    // step's control latents (inpaint masks) are one tensor beside its targets.
    auto all_or_none = [&](const char* key, const char* noun,
                           bool (config::DatasetConfig::*has)() const) {
        const bool first = (process.datasets.front().*has)();
        for (std::size_t d = 1; d < process.datasets.size(); ++d) {
            if ((process.datasets[d].*has)() == first) continue;
            const std::string name = "datasets." + std::to_string(d);
            throw ConfigError("", name + "." + key,
                              name + (first ? " has no " : " has a ") + key + " while datasets.0 " +
                                  (first ? "has one" : "has none") +
                                  ": give every dataset of the job its " + noun + ", or none");
        }
        return first;
    };
    has_controls_ =
        all_or_none("control_path", "control images", &config::DatasetConfig::has_controls);
    has_inpaint_ =
        all_or_none("inpaint_path", "inpaint images", &config::DatasetConfig::has_inpaint);
    // One batch size for the whole data order: a per-dataset override applies when the datasets
    // agree on it (ai-toolkit batches inside each dataset; loom's buckets span them). The data
    // order follows the job's batch, never the plan's micro-batch, so a plan change does not
    // change which items a step trains on.
    const int batch = process.datasets.front().batch_size.value_or(process.train.batch_size);
    for (const auto& dc : process.datasets) {
        if (dc.batch_size.value_or(process.train.batch_size) != batch) {
            train_log().warn("datasets ask for different batch sizes; loom uses {} for all of them",
                             batch);
            break;
        }
    }
    order_ = std::make_unique<data::DataOrder>(bucket_items(plan.frames, plan.max_bucket_pixels),
                                               batch * ranks, seed);
    log_buckets();
    cache_text_ = process.train.cache_text_embeddings;
    for (const auto& dc : process.datasets) {
        cache_latents_ = cache_latents_ || dc.cache_latents || dc.cache_latents_to_disk;
        cache_disk_latents_ = cache_disk_latents_ || dc.cache_latents_to_disk;
        cache_text_ = cache_text_ || dc.cache_text_embeddings;
    }
    build_caches(plan);
}

// The latent cache covers every dataset once any asks for it (the constructor above); shuffled
// captions make a new text every step, so their encoder never idles.
bool TrainingData::encoders_can_idle(const config::ProcessConfig& process) {
    bool latents = false;
    for (const auto& dc : process.datasets) {
        latents = latents || dc.cache_latents || dc.cache_latents_to_disk;
        if (dc.shuffle_tokens) return false;
    }
    return latents;
}

// The latent and text-embedding caches as the job and the plan ask: in RAM, or — once host RAM
// ran out (host.memory_caches: false) — on disk only, next to the images and in the run folder.
// With low_vram the text encoder lives on the host, so text embeddings are always cached.

void TrainingData::build_caches(const guard::Plan& p) {
    const bool in_ram = p.host.memory_caches;
    latent_cache_ = std::make_unique<data::LatentCache>(cache_identity_, cache_latents_ && in_ram,
                                                        cache_disk_latents_ || !in_ram);
    text_cache_ = make_text_cache(p);
}

std::unique_ptr<data::TextEmbeddingCache> TrainingData::make_text_cache(
    const guard::Plan& p) const {
    const bool in_ram = p.host.memory_caches;
    return std::make_unique<data::TextEmbeddingCache>(
        cache_identity_, (cache_text_ || p.low_vram >= 1) && in_ram,
        in_ram ? std::nullopt : std::optional<std::filesystem::path>(run_root_ / "cache"));
}

data::BucketPlan TrainingData::bucket_items(int max_frames,
                                            std::optional<std::int64_t> max_pixels) {
    for (std::size_t i = 0; i < items_.size(); ++i) {
        const data::ImageRecord& record = *items_[i].image;
        int frames = 1;  // an image, also in a video dataset
        if (record.is_clip()) {
            frames = static_cast<int>(
                clip_sampling_.at(items_[i].dataset)
                    .frames_for(record.video->frames, record.video->fps, max_frames));
        }
        items_[i].item.frames = frames;
        dataset_items_[i].frames = frames;
    }
    return data::assign_buckets(dataset_items_, image_sizes_, divisibility_, max_pixels);
}

void TrainingData::use_global_batch(int batch) {
    if (batch == order_->batch_size()) return;
    order_ = std::make_unique<data::DataOrder>(order_->plan(), batch, order_->seed());
}

void TrainingData::apply_plan(const guard::Plan& from, const guard::Plan& to) {
    if (from.max_bucket_pixels != to.max_bucket_pixels || from.frames != to.frames) {
        // The items keep their place in the data order; a retried step's items train at their
        // new bucket (data::split_micro_batches regroups them).
        order_->replace_plan(bucket_items(to.frames, to.max_bucket_pixels));
        log_buckets();
    }
    if (from.host.memory_caches != to.host.memory_caches) {
        latent_cache_->clear_memory();
        text_cache_->clear_memory();
        build_caches(to);
        train_log().warn("latents and text embeddings are now cached on disk instead of RAM");
    }
    if (from.low_vram == 0 && to.low_vram > 0) text_cache_ = make_text_cache(to);
}

guard::BucketFacts TrainingData::bucket_facts() const {
    guard::BucketFacts f;
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
    for (const data::Bucket& b : plan.buckets) {
        if (!b.items.empty()) f.longest_clip = std::max(f.longest_clip.value_or(1), b.size.frames);
    }
    return f;
}

void TrainingData::log_buckets() const {
    for (const data::Bucket& b : order_->plan().buckets) {
        train_log().info("bucket {}: {} items", b.size.key(), b.items.size());
    }
}

at::Tensor TrainingData::latent(std::size_t index, data::BucketSize bucket,
                                const LatentEncode& encode) {
    const TrainingItem& it = items_.at(index);
    std::vector<std::int64_t> frames;  // a clip's, at the bucket's frame count
    if (it.image->is_clip()) {
        frames = clip_sampling_.at(it.dataset)
                     .indices(it.image->video->frames, it.image->video->fps, bucket.frames);
    }
    return latent_cache_->get(
        *it.image, bucket, it.item.flip_x, it.item.flip_y,
        [&](const at::Tensor& image) { return encode(it, image); }, frames);
}

std::vector<data::BucketSize> TrainingData::control_sizes(std::size_t index,
                                                          data::BucketSize bucket) const {
    std::vector<data::BucketSize> out;
    for (const auto& control : items_.at(index).image->controls) {
        data::BucketSize size = bucket;
        if (control_size_) {
            const auto [w, h] =
                control_size_(control->width, control->height, bucket.width, bucket.height);
            size.width = static_cast<int>(w);
            size.height = static_cast<int>(h);
        }
        size.frames = 1;
        out.push_back(size);
    }
    return out;
}

at::Tensor TrainingData::control_latent(std::size_t index, std::size_t which, data::BucketSize size,
                                        const LatentEncode& encode) {
    const TrainingItem& it = items_.at(index);
    if (which >= it.image->controls.size()) return {};
    return latent_cache_->get(*it.image->controls[which], size, it.item.flip_x, it.item.flip_y,
                              [&](const at::Tensor& image) { return encode(it, image); });
}

void TrainingData::cache_all_latents(const LatentEncode& encode) {
    const data::BucketPlan& plan = order_->plan();
    for (std::size_t i = 0; i < items_.size(); ++i) {
        latent(i, plan.item_bucket.at(i), encode);
        const std::vector<data::BucketSize> sizes = control_sizes(i, plan.item_bucket.at(i));
        for (std::size_t c = 0; c < sizes.size(); ++c) control_latent(i, c, sizes[c], encode);
    }
    train_log().info("cached {} latents", items_.size());
}

void TrainingData::cache_all_text(const TextEncode& encode) {
    // Without a cache that keeps them (low_vram 0, no cache_text_embeddings) each step encodes.
    if (!text_cache_->keeps_entries()) return;
    // Each text the steps can draw, by its cache key: the caption alone, or with the item's
    // controls; the caption and one item it comes with.
    std::map<std::string, std::pair<std::string, std::size_t>> texts;
    for (std::size_t i = 0; i < items_.size(); ++i) {
        const TrainingItem& it = items_[i];
        data::CaptionOptions o = caption_options_.at(it.dataset);
        if (o.shuffle_tokens) return;  // any order of the tokens can come up: encoded when drawn
        std::vector<std::string> captions;
        if (o.caption_dropout_rate > 0) captions.push_back("");
        o.caption_dropout_rate = 0;
        data::Rng unused(0);  // without dropout and shuffling nothing is drawn
        captions.push_back(data::process_caption(it.image->caption, o, unused));
        for (const std::string& c : captions) texts.try_emplace(text_key(i, c), c, i);
    }
    for (const auto& [key, text] : texts) conditioning(text.second, text.first, encode);
    train_log().info("cached {} text embeddings", texts.size());
}

std::string TrainingData::text_key(std::size_t index, const std::string& caption) const {
    if (!controls_in_prompt_) return caption;
    // The controls by content: the same caption with other control images is another text.
    std::string key = caption;
    for (const auto& control : items_.at(index).image->controls)
        key += "\x1f" + control->content_hash;
    return key;
}

NamedTensors TrainingData::conditioning(std::size_t index, const std::string& caption,
                                        const TextEncode& encode) {
    return text_cache_->get(text_key(index, caption), [&](const std::string&) {
        std::vector<at::Tensor> controls;
        if (controls_in_prompt_) {
            // As the files are: the pipeline resizes them for its text encoder itself.
            for (const auto& control : items_.at(index).image->controls)
                controls.push_back(data::rgb8_tensor(data::read_image(control->path)));
        }
        return encode(caption, controls);
    });
}

std::string TrainingData::caption(const data::StepSlot& slot,
                                  const std::vector<data::Batch>& batches,
                                  std::uint64_t seed) const {
    const TrainingItem& it = items_.at(slot.item);
    data::Rng rng = batches.at(slot.batch).slot_rng(seed, slot.k);
    return data::process_caption(it.image->caption, caption_options_.at(it.dataset), rng);
}

namespace {

// A draw below `chance` from the slot's generator on `stream` (not the caption's, which draws
// from slot_rng(seed, k)).
bool slot_chance(double chance, std::uint64_t stream, const data::StepSlot& slot,
                 const std::vector<data::Batch>& batches, std::uint64_t seed) {
    if (chance <= 0) return false;
    data::Rng rng = batches.at(slot.batch).slot_rng(seed ^ stream, slot.k);
    return data::uniform01(rng) < chance;
}

}  // namespace

bool TrainingData::control_dropped(const data::StepSlot& slot,
                                   const std::vector<data::Batch>& batches,
                                   std::uint64_t seed) const {
    return slot_chance(control_dropout_, 0x636f6e74726f6cULL /* "control" */, slot, batches, seed);
}

bool TrainingData::inpaint_dropped(const data::StepSlot& slot,
                                   const std::vector<data::Batch>& batches,
                                   std::uint64_t seed) const {
    return slot_chance(inpaint_dropout_, 0x696e7061696e74ULL /* "inpaint" */, slot, batches, seed);
}

bool TrainingData::inpaint_inverted(const data::StepSlot& slot,
                                    const std::vector<data::Batch>& batches,
                                    std::uint64_t seed) const {
    return slot_chance(invert_inpaint_chance_, 0x696e76657274ULL /* "invert" */, slot, batches,
                       seed);
}

at::Tensor TrainingData::inpaint_keep(std::size_t index, data::BucketSize bucket, int64_t height,
                                      int64_t width) const {
    const TrainingItem& it = items_.at(index);
    if (!it.image->inpaint) return {};
    const data::Image alpha = data::read_alpha(it.image->inpaint->path);
    // [-1, 1] like an image; every channel holds the alpha.
    const at::Tensor fitted = data::fitted_tensor(alpha, bucket, it.item.flip_x, it.item.flip_y);
    const at::Tensor keep = (fitted.narrow(0, 0, 1) + 1) / 2;
    return at::upsample_bilinear2d(keep.unsqueeze(0), {height, width}, /*align_corners=*/false)
        .squeeze(0);
}

}  // namespace loom
