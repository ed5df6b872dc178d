#pragma once

// Latent and text-embedding caches (ai-toolkit's cache_latents, cache_latents_to_disk,
// cache_text_embeddings). The data layer never sees the VAE or the text encoder: callers pass
// the encoder in as a callable.
//
// An entry is identified by a key that digests everything its tensor depends on:
//   latents:    SHA-256 of the image bytes, bucket size, flip_x, flip_y, model identity, and
//               for a clip the frames it takes
//   embeddings: the caption text, model identity
// (the model identity is the caller's string for "which encoder, which weights, which dtype").
// Key = the first 16 hex digits of SHA-256 over those fields, so a changed image, bucket, flip
// or model gets a new entry and never a stale one.
//
// In RAM (keep_in_memory) the tensors are host-resident copies (HostAllocations,
// device/host_memory.h): they never count against the simulated device's budget. On disk:
//   latents:    <image folder>/_latent_cache/<stem>_<key>.safetensors   (tensor "latent")
//   embeddings: <dataset folder>/_t_e_cache/<key>.safetensors           (the encoder's tensors,
//               by their names: e.g. "context" and, for SDXL, "text_embeds")
// written atomically, with the key's fields in the file's metadata. A file whose metadata does
// not match, or that cannot be read, is stale: it is rebuilt (re-encoded and rewritten) with one
// warning. get() returns a host tensor that shares storage with the RAM entry: callers move it
// to the device (a copy) and never modify it in place.
//
// Thread-safe: get() may be called from several threads (the encoder is called without the
// lock held, so two threads may encode the same missing entry; the last store wins).

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "loom/data/bucket.h"
#include "loom/model/loading/tensor_file.h"

namespace loom::data {

struct ImageRecord;

struct CacheStats {
    std::size_t memory_hits = 0;
    std::size_t disk_hits = 0;
    std::size_t encoded = 0;  // misses, including rebuilds
    std::size_t rebuilt = 0;  // stale or unreadable disk files replaced
};

struct LatentKey {
    std::string content_hash;
    BucketSize bucket;
    bool flip_x = false;
    bool flip_y = false;
    std::string model;
    std::vector<std::int64_t> frames;  // a clip's frame indices; empty for an image

    std::string key() const;  // 16 hex digits
};

class LatentCache {
  public:
    // [3, H, W] (a clip: [3, F, H, W]) float32 in [-1, 1] (image_tensor.h) -> latent; any
    // device, any dtype.
    using Encode = std::function<at::Tensor(const at::Tensor& image)>;

    LatentCache(std::string model_identity, bool keep_in_memory, bool keep_on_disk);

    // The latent of `image` fitted to `bucket` and flipped as asked (a clip: its frames at
    // `frames`): from RAM, else from disk, else read + fit + encode (then stored where
    // configured). Throws like read_image / read_video_frames when the file cannot be read,
    // IoError when a cache file cannot be written.
    at::Tensor get(const ImageRecord& image, BucketSize bucket, bool flip_x, bool flip_y,
                   const Encode& encode, const std::vector<std::int64_t>& frames = {});

    LatentKey key_for(const ImageRecord& image, BucketSize bucket, bool flip_x, bool flip_y,
                      const std::vector<std::int64_t>& frames = {}) const;
    static std::filesystem::path disk_path(const ImageRecord& image, const LatentKey& key);

    CacheStats stats() const;
    std::size_t memory_entries() const;
    std::size_t memory_bytes() const;
    void clear_memory();

  private:
    std::string model_;
    bool in_memory_;
    bool on_disk_;
    mutable std::mutex mutex_;
    std::unordered_map<std::string, at::Tensor> memory_;
    CacheStats stats_;
};

// A caption's conditioning is whatever named tensors the text encoder(s) produce for it (the
// token context, a pooled embedding, ...): the cache stores and returns them as a set, any
// count and any shapes, without knowing what they mean.
class TextEmbeddingCache {
  public:
    using Encode = std::function<NamedTensors(const std::string& caption)>;

    // `disk_folder`: the dataset folder whose _t_e_cache/ holds the files; nullopt keeps the
    // cache in RAM only.
    TextEmbeddingCache(std::string model_identity, bool keep_in_memory,
                       std::optional<std::filesystem::path> disk_folder);

    // The caption's tensors, in the order the encoder returned them.
    NamedTensors get(const std::string& caption, const Encode& encode);

    std::string key_for(const std::string& caption) const;  // 16 hex digits
    std::optional<std::filesystem::path> disk_path(const std::string& caption) const;

    CacheStats stats() const;
    std::size_t memory_entries() const;
    void clear_memory();
    // Whether an encoded caption is kept (in RAM or on disk); false: every get encodes.
    bool keeps_entries() const { return in_memory_ || folder_.has_value(); }

  private:
    std::string model_;
    bool in_memory_;
    std::optional<std::filesystem::path> folder_;
    mutable std::mutex mutex_;
    std::unordered_map<std::string, NamedTensors> memory_;
    CacheStats stats_;
};

}  // namespace loom::data
