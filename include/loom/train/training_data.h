#pragma once

// The training set of a run: the job's datasets scanned and expanded into items (resolutions,
// repeats, flips), each clip's frames under the plan's frame cap, the items bucketed by size and
// frames under the plan's bucket cap, the seeded data order that hands out each step's batches,
// and the latent / text-embedding caches. It owns the memory knobs that are about data — the
// bucket cap, the clips' frames and where the caches live — and applies them when the plan
// changes. The encoders themselves belong to the model: callers pass them in.

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/config/job.h"
#include "loom/data/bucket.h"
#include "loom/data/caption.h"
#include "loom/data/clip_frames.h"
#include "loom/data/data_order.h"
#include "loom/data/dataset.h"
#include "loom/data/micro_batch.h"
#include "loom/data/tensor_cache.h"
#include "loom/guard/ladder_policy.h"
#include "loom/guard/plan.h"

namespace loom {

// One image or clip of the training set at one resolution, flipped or not, from one dataset.
struct TrainingItem {
    std::size_t dataset;
    const data::ImageRecord* image;
    data::DatasetItem item;
};

class TrainingData {
  public:
    // The model's side of the data: bucket sides are multiples of `divisibility`, clips'
    // frame counts 1 + k * `temporal_compression`; `identity` keys the caches.
    struct ModelFacts {
        int divisibility = 16;
        int temporal_compression = 1;
        std::string identity;
        // The text encoder reads the items' control images (Qwen-Image-Edit): a caption's
        // conditioning is the caption's and its item's controls'.
        bool controls_in_prompt = false;
        // The (width, height) a control image of (width, height) is encoded at for a target of
        // (width, height) (ModelFamily::control_size); unset: the target's.
        std::function<std::pair<int64_t, int64_t>(int64_t, int64_t, int64_t, int64_t)> control_size;
    };
    // Scans `process`'s datasets (throws like data::scan_dataset), gives each clip its frames
    // and buckets the items under `plan`, and sets up the caches the job asks for. `run_root`
    // holds the text cache once caches leave RAM. With `ranks` > 1 (a data-parallel run) the
    // data order hands out global batches of the job's batch size times `ranks`, which every
    // rank draws alike and shares (data::Shard).
    TrainingData(const config::ProcessConfig& process, ModelFacts model, const guard::Plan& plan,
                 std::filesystem::path run_root, std::uint64_t seed, int ranks = 1);

    data::DataOrder& order() { return *order_; }
    // The data order again at another global batch (a resume with a different number of ranks
    // keeps the checkpoint's global batch), from the start of the current epoch.
    void use_global_batch(int batch);
    const data::BucketPlan& buckets() const { return order_->plan(); }
    const TrainingItem& item(std::size_t index) const { return items_.at(index); }
    bool caches_latents() const { return cache_latents_; }
    // Whether the encoders can sit idle during steps under `process`: its latents are cached and
    // its captions repeat (no dataset shuffles its tokens, which makes a new caption each time),
    // so once low_vram level 1 caches the text embeddings (it always does), the encoders only
    // work for previews and a caption's first use — the ladder's free rung
    // (guard::PolicyContext::encoders_idle).
    static bool encoders_can_idle(const config::ProcessConfig& process);

    // The knobs data owns: datasets.max_bucket_pixels, datasets.num_frames (the clips' frame
    // cap), host.memory_caches, and the text cache that low_vram needs (the text encoder leaves
    // the device).
    void apply_plan(const guard::Plan& from, const guard::Plan& to);
    guard::BucketFacts bucket_facts() const;
    void log_buckets() const;

    // Encodes an item's fitted, flipped image ([3, H, W] in [-1, 1]; a clip [3, F, H, W]) into
    // its latent.
    using LatentEncode =
        std::function<at::Tensor(const TrainingItem& item, const at::Tensor& image)>;
    // The latent of item `index` at `bucket`, from the cache or through `encode`.
    at::Tensor latent(std::size_t index, data::BucketSize bucket, const LatentEncode& encode);
    // The sizes item `index`'s control images (datasets[].control_path, one per folder) are
    // encoded at for `bucket`: the bucket's (so the bucket rung shrinks them with their target),
    // or the model's own size for each (Edit-2509); empty for an item without controls.
    std::vector<data::BucketSize> control_sizes(std::size_t index, data::BucketSize bucket) const;
    // The latent of item `index`'s control image `which` fitted to `size` (scale and centre
    // crop) and flipped as the item is, from the cache or through `encode`; undefined for an
    // item without one.
    at::Tensor control_latent(std::size_t index, std::size_t which, data::BucketSize size,
                              const LatentEncode& encode);
    // Whether the items pair with control images: all do, or none (the constructor refuses a
    // mix, which could not share a batch).
    bool has_controls() const { return has_controls_; }
    // Whether the item in `slot` of this step trains without its control image (Flex.2's
    // model_kwargs.control_dropout): drawn from the slot's own generator as caption dropout is,
    // on a stream of its own, so a retried or resumed step drops the same items.
    bool control_dropped(const data::StepSlot& slot, const std::vector<data::Batch>& batches,
                         std::uint64_t seed) const;
    // Item `index`'s inpaint keep mask (datasets[].inpaint_path: the alpha of its inpaint image,
    // fitted to the bucket and flipped as the item is, in [0, 1], 1 where the image is kept)
    // resized bilinearly to its `height` x `width` latent, [1, height, width] float32 on the
    // host, as ai-toolkit's Flex2 resizes the mask; undefined for an item without one.
    at::Tensor inpaint_keep(std::size_t index, data::BucketSize bucket, int64_t height,
                            int64_t width) const;
    bool has_inpaint() const { return has_inpaint_; }
    // Flex.2's inpaint dropout (model_kwargs.inpaint_dropout: the item trains without its
    // inpaint image) and mask inversion (invert_inpaint_mask_chance), drawn as control_dropped,
    // each on a stream of its own.
    bool inpaint_dropped(const data::StepSlot& slot, const std::vector<data::Batch>& batches,
                         std::uint64_t seed) const;
    bool inpaint_inverted(const data::StepSlot& slot, const std::vector<data::Batch>& batches,
                          std::uint64_t seed) const;
    // Every item's latent (and control latent) at its bucket (the cache phase). After an OOM,
    // the retry skips what is already cached.
    void cache_all_latents(const LatentEncode& encode);
    // Every caption a step can draw (each item's caption, and "" under caption dropout) encoded
    // into the text cache (the cache phase), so that the encoders stay idle once training starts:
    // with low_vram they never come back to the device for a step. Only when captions are not
    // shuffled (encoders_can_idle) and the text cache keeps what it is given; a no-op otherwise.
    // A caption's conditioning from the text encoder(s), given the control images (uint8
    // [H, W, 3] as on disk) of its item when the model reads them in the prompt, else none.
    using TextEncode = std::function<NamedTensors(const std::string& caption,
                                                  const std::vector<at::Tensor>& controls)>;
    void cache_all_text(const TextEncode& encode);
    // Item `index`'s conditioning for `caption`, from the cache or through `encode`: keyed by
    // the caption, and by its item's control images when the model reads them in the prompt.
    NamedTensors conditioning(std::size_t index, const std::string& caption,
                              const TextEncode& encode);
    // The caption slot `slot` of a step trains on (dropout, shuffling: seeded by the slot).
    std::string caption(const data::StepSlot& slot, const std::vector<data::Batch>& batches,
                        std::uint64_t seed) const;

  private:
    // Each item's frames under the frame cap `max_frames`, then its bucket under `max_pixels`.
    data::BucketPlan bucket_items(int max_frames, std::optional<std::int64_t> max_pixels);
    void build_caches(const guard::Plan& p);
    std::unique_ptr<data::TextEmbeddingCache> make_text_cache(const guard::Plan& p) const;
    // The text cache's key of item `index`'s `caption` (conditioning says what it covers).
    std::string text_key(std::size_t index, const std::string& caption) const;

    std::vector<data::ScannedDataset> datasets_;
    std::vector<data::CaptionOptions> caption_options_;
    std::vector<data::ClipSampling> clip_sampling_;  // per dataset
    std::vector<data::DatasetItem> dataset_items_;   // what buckets are assigned from
    std::vector<data::ImageSize> image_sizes_;
    int divisibility_;
    std::vector<TrainingItem> items_;
    std::unique_ptr<data::DataOrder> order_;
    std::unique_ptr<data::LatentCache> latent_cache_;
    std::unique_ptr<data::TextEmbeddingCache> text_cache_;
    bool cache_latents_ = false;
    bool cache_disk_latents_ = false;
    bool cache_text_ = false;
    bool has_controls_ = false;
    bool controls_in_prompt_ = false;
    std::function<std::pair<int64_t, int64_t>(int64_t, int64_t, int64_t, int64_t)> control_size_;
    double control_dropout_ = 0;
    bool has_inpaint_ = false;
    double inpaint_dropout_ = 0;
    double invert_inpaint_chance_ = 0;
    std::string cache_identity_;
    std::filesystem::path run_root_;
};

}  // namespace loom
