#include "loom/data/tensor_cache.h"

#include <ATen/ATen.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "loom/core/error.h"
#include "loom/core/logging.h"
#include "loom/core/sha256.h"
#include "loom/data/dataset.h"
#include "loom/data/image_tensor.h"
#include "loom/device/host_memory.h"
#include "loom/io/safetensors.h"
#include "loom/model/loading/tensor_file.h"

namespace loom::data {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLatentFormat = "loom.latent_cache.v1";
// v2: a set of named tensors (v1 held one packed tensor); v1 files are stale and rebuilt.
constexpr const char* kTextFormat = "loom.text_embedding_cache.v2";

std::string short_digest(const std::string& text) {
    return sha256_hex(text).substr(0, 16);
}

const char* flag(bool b) {
    return b ? "true" : "false";
}

// A host-resident copy that owns its memory (a CPU tensor from a sim encoder would otherwise be
// returned as is and keep counting against the budget).
at::Tensor host_copy(const at::Tensor& t) {
    HostAllocations host;
    return t.detach()
        .to(at::kCPU, t.scalar_type(), /*non_blocking=*/false, /*copy=*/true)
        .contiguous();
}

// The tensors of a cache file whose metadata equals `expected`: the one named `tensor_name`, or
// all of them (in the file's order) when it is nullptr. nullopt when the file does not exist, or
// (with `stale` set to why) when it cannot be used.
std::optional<NamedTensors> load_entry(const fs::path& path, const char* tensor_name,
                                       const SafetensorsMetadata& expected, std::string& stale) {
    std::error_code ec;
    if (!fs::exists(path, ec)) return std::nullopt;
    try {
        HostAllocations host;
        const SafetensorsFile file = SafetensorsFile::open(path);
        for (const auto& [key, value] : expected) {
            const std::string* got = file.metadata_value(key);
            if (got == nullptr || *got != value) {
                stale = "its " + key + " is " + (got ? "'" + *got + "'" : "missing") +
                        ", expected '" + value + "'";
                return std::nullopt;
            }
        }
        NamedTensors out;
        if (tensor_name == nullptr) {
            for (const TensorInfo& info : file.tensors()) {
                out.emplace_back(info.name, read_tensor(file, info));
            }
            if (out.empty()) stale = "it holds no tensor";
            return out.empty() ? std::nullopt : std::optional<NamedTensors>(std::move(out));
        }
        const TensorInfo* info = file.find(tensor_name);
        if (info == nullptr) {
            stale = std::string("it has no tensor '") + tensor_name + "'";
            return std::nullopt;
        }
        out.emplace_back(tensor_name, read_tensor(file, *info));
        return out;
    } catch (const Error& e) {
        stale = e.what();
        return std::nullopt;
    }
}

void store_entry(const fs::path& path, const NamedTensors& tensors,
                 const SafetensorsMetadata& metadata) {
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    if (ec)
        throw IoError(path.parent_path().string(),
                      "cannot create the cache folder: " + ec.message());
    HostAllocations host;
    write_tensors(path, tensors, metadata);
}

// "0,2,4": the frames of a clip, in a key and in a cache file's metadata.
std::string frame_list(const std::vector<std::int64_t>& frames) {
    std::string out;
    for (std::int64_t f : frames) {
        if (!out.empty()) out += ',';
        out += std::to_string(f);
    }
    return out;
}

std::string read_bytes(const fs::path& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr)
        throw IoError(path.string(), "cannot open the image: " + std::string(std::strerror(errno)));
    std::string out;
    char buffer[1 << 16];
    std::size_t n = 0;
    while ((n = std::fread(buffer, 1, sizeof buffer, f)) > 0) out.append(buffer, n);
    const bool failed = std::ferror(f) != 0;
    std::fclose(f);
    if (failed) throw IoError(path.string(), "cannot read the image");
    return out;
}

}  // namespace

std::string LatentKey::key() const {
    // An image's key is unchanged from before clips existed, so its cache files stay valid.
    std::string text = std::string("loom-latent-v1\n") + content_hash + "\n" + bucket.key() + "\n" +
                       flag(flip_x) + "\n" + flag(flip_y) + "\n" + model;
    if (!frames.empty()) text += "\nframes " + frame_list(frames);
    return short_digest(text);
}

LatentCache::LatentCache(std::string model_identity, bool keep_in_memory, bool keep_on_disk)
    : model_(std::move(model_identity)), in_memory_(keep_in_memory), on_disk_(keep_on_disk) {}

LatentKey LatentCache::key_for(const ImageRecord& image, BucketSize bucket, bool flip_x,
                               bool flip_y, const std::vector<std::int64_t>& frames) const {
    return {image.content_hash, bucket, flip_x, flip_y, model_, frames};
}

fs::path LatentCache::disk_path(const ImageRecord& image, const LatentKey& key) {
    return image.path.parent_path() / "_latent_cache" /
           (image.path.stem().string() + "_" + key.key() + ".safetensors");
}

at::Tensor LatentCache::get(const ImageRecord& image, BucketSize bucket, bool flip_x, bool flip_y,
                            const Encode& encode, const std::vector<std::int64_t>& frames) {
    const LatentKey key = key_for(image, bucket, flip_x, flip_y, frames);
    const std::string id = key.key();
    if (in_memory_) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = memory_.find(id);
        if (it != memory_.end()) {
            ++stats_.memory_hits;
            return it->second;
        }
    }
    const fs::path path = disk_path(image, key);
    SafetensorsMetadata meta = {{"format", kLatentFormat}, {"content_sha256", key.content_hash},
                                {"bucket", bucket.key()},  {"flip_x", flag(flip_x)},
                                {"flip_y", flag(flip_y)},  {"model", model_}};
    if (!frames.empty()) meta.emplace_back("frames", frame_list(frames));
    std::string stale;
    if (on_disk_) {
        if (std::optional<NamedTensors> t = load_entry(path, "latent", meta, stale)) {
            const at::Tensor latent = t->front().second;
            std::lock_guard<std::mutex> lock(mutex_);
            ++stats_.disk_hits;
            if (in_memory_) memory_[id] = latent;
            return latent;
        }
    }

    // Miss: read, check the bytes are still the scanned ones, fit, flip, encode.
    const std::string bytes = read_bytes(image.path);
    const bool changed = sha256_hex(bytes) != image.content_hash;
    if (changed)
        logger("data").warn(
            "{} changed since the dataset was scanned; encoding its current "
            "content, not caching it on disk (restart to rescan)",
            image.path.string());
    const at::Tensor pixels =
        image.is_clip()
            ? fitted_clip_tensor(read_video_frames(image.path, frames), bucket, flip_x, flip_y)
            : fitted_tensor(decode_image(bytes, image.path.string()), bucket, flip_x, flip_y);
    const at::Tensor latent = encode(pixels);
    TORCH_CHECK(latent.defined(), "the latent encoder returned an undefined tensor for ",
                image.path.string());
    const at::Tensor host = host_copy(latent);

    if (on_disk_ && !changed) {
        if (!stale.empty())
            logger("data").warn("rebuilding stale latent cache file {} ({})", path.string(), stale);
        store_entry(path, {{"latent", host}}, meta);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.encoded;
    if (!stale.empty()) ++stats_.rebuilt;
    if (in_memory_ && !changed) memory_[id] = host;
    return host;
}

CacheStats LatentCache::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

std::size_t LatentCache::memory_entries() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return memory_.size();
}

std::size_t LatentCache::memory_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::size_t total = 0;
    for (const auto& [id, t] : memory_) total += t.nbytes();
    return total;
}

void LatentCache::clear_memory() {
    std::lock_guard<std::mutex> lock(mutex_);
    memory_.clear();
}

TextEmbeddingCache::TextEmbeddingCache(std::string model_identity, bool keep_in_memory,
                                       std::optional<fs::path> disk_folder)
    : model_(std::move(model_identity)),
      in_memory_(keep_in_memory),
      folder_(std::move(disk_folder)) {}

std::string TextEmbeddingCache::key_for(const std::string& caption) const {
    return short_digest("loom-text-v1\n" + model_ + "\n" + caption);
}

std::optional<fs::path> TextEmbeddingCache::disk_path(const std::string& caption) const {
    if (!folder_) return std::nullopt;
    return *folder_ / "_t_e_cache" / (key_for(caption) + ".safetensors");
}

NamedTensors TextEmbeddingCache::get(const std::string& caption, const Encode& encode) {
    const std::string id = key_for(caption);
    if (in_memory_) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = memory_.find(id);
        if (it != memory_.end()) {
            ++stats_.memory_hits;
            return it->second;
        }
    }
    const std::optional<fs::path> path = disk_path(caption);
    const SafetensorsMetadata meta = {
        {"format", kTextFormat}, {"model", model_}, {"caption", caption}};
    std::string stale;
    if (path) {
        if (std::optional<NamedTensors> t = load_entry(*path, nullptr, meta, stale)) {
            std::lock_guard<std::mutex> lock(mutex_);
            ++stats_.disk_hits;
            if (in_memory_) memory_[id] = *t;
            return *t;
        }
    }
    NamedTensors host = encode(caption);
    TORCH_CHECK(!host.empty(), "the text encoder returned no tensor");
    for (auto& [name, tensor] : host) {
        TORCH_CHECK(tensor.defined(), "the text encoder returned an undefined tensor '", name, "'");
        tensor = host_copy(tensor);
    }
    if (path) {
        if (!stale.empty())
            logger("data").warn("rebuilding stale text embedding cache file {} ({})",
                                path->string(), stale);
        store_entry(*path, host, meta);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.encoded;
    if (!stale.empty()) ++stats_.rebuilt;
    if (in_memory_) memory_[id] = host;
    return host;
}

CacheStats TextEmbeddingCache::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

std::size_t TextEmbeddingCache::memory_entries() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return memory_.size();
}

void TextEmbeddingCache::clear_memory() {
    std::lock_guard<std::mutex> lock(mutex_);
    memory_.clear();
}

}  // namespace loom::data
