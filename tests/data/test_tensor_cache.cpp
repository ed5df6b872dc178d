// Latent and text-embedding caches: hits, keys, disk files, stale rebuilds, host residency.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>

#include "data_test_util.h"
#include "loom/data/dataset.h"
#include "loom/data/image_tensor.h"
#include "loom/data/tensor_cache.h"
#include "loom/device/device.h"
#include "loom/device/sim_allocator.h"
#include "loom/io/safetensors.h"
#include "loom/model/loading/tensor_file.h"

namespace loom::data {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

// A stand-in VAE: 8x average pooling, [3, H, W] -> [3, H/8, W/8]; counts its calls.
struct FakeVae {
    int calls = 0;
    LatentCache::Encode fn() {
        return [this](const at::Tensor& image) {
            ++calls;
            EXPECT_EQ(image.dim(), 3);
            return at::avg_pool2d(image.unsqueeze(0), 8).squeeze(0);
        };
    }
};

ScannedDataset one_image(const TempDir& dir, int seed = 0) {
    test::write_file(dir / "img" / "cat.png", encode_png(test::pattern_image(64, 32, seed)));
    return scan_dataset(test::dataset_config(dir / "img"));
}

TEST(LatentCache, SecondRequestIsAMemoryHit) {
    TempDir dir;
    const ScannedDataset d = one_image(dir);
    FakeVae vae;
    LatentCache cache("sd15-test", true, false);
    const at::Tensor a = cache.get(d.images[0], {64, 32}, false, false, vae.fn());
    const at::Tensor b = cache.get(d.images[0], {64, 32}, false, false, vae.fn());
    EXPECT_EQ(vae.calls, 1);
    EXPECT_EQ(a.sizes(), (at::IntArrayRef{3, 4, 8}));
    EXPECT_TRUE(torch::equal(a, b));
    EXPECT_TRUE(torch::allclose(
        a, at::avg_pool2d(load_item_tensor(d.images[0], {64, 32}, false, false).unsqueeze(0), 8)
               .squeeze(0)));
    const CacheStats s = cache.stats();
    EXPECT_EQ(s.memory_hits, 1u);
    EXPECT_EQ(s.encoded, 1u);
    EXPECT_EQ(cache.memory_entries(), 1u);
    EXPECT_EQ(cache.memory_bytes(), 3u * 4 * 8 * 4);
    EXPECT_FALSE(fs::exists(dir / "img" / "_latent_cache"));  // RAM only
}

TEST(LatentCache, BucketFlipAndModelAreTheKey) {
    TempDir dir;
    const ScannedDataset d = one_image(dir);
    FakeVae vae;
    LatentCache cache("sd15-test", true, false);
    const at::Tensor plain = cache.get(d.images[0], {64, 32}, false, false, vae.fn());
    const at::Tensor flipped = cache.get(d.images[0], {64, 32}, true, false, vae.fn());
    cache.get(d.images[0], {32, 16}, false, false, vae.fn());
    EXPECT_EQ(vae.calls, 3);
    EXPECT_TRUE(torch::allclose(flipped, plain.flip({2}), 1e-6, 1e-6));
    EXPECT_FALSE(torch::equal(flipped, plain));

    const LatentKey k = cache.key_for(d.images[0], {64, 32}, false, false);
    EXPECT_EQ(k.key().size(), 16u);
    LatentKey other = k;
    other.model = "sdxl";
    EXPECT_NE(other.key(), k.key());
    other = k;
    other.flip_y = true;
    EXPECT_NE(other.key(), k.key());
    other = k;
    other.content_hash[0] = other.content_hash[0] == '0' ? '1' : '0';
    EXPECT_NE(other.key(), k.key());
    EXPECT_EQ(
        LatentCache("sd15-test", true, false).key_for(d.images[0], {64, 32}, false, false).key(),
        k.key());
}

TEST(LatentCache, DiskFilesAreReusedByANewProcess) {
    TempDir dir;
    const ScannedDataset d = one_image(dir);
    FakeVae vae;
    at::Tensor first;
    fs::path file;
    {
        LatentCache cache("sd15-test", false, true);
        first = cache.get(d.images[0], {64, 32}, false, true, vae.fn());
        file =
            LatentCache::disk_path(d.images[0], cache.key_for(d.images[0], {64, 32}, false, true));
    }
    EXPECT_EQ(file.parent_path(), dir / "img" / "_latent_cache");
    EXPECT_EQ(file.filename().string().rfind("cat_", 0), 0u);
    EXPECT_EQ(file.extension(), ".safetensors");
    ASSERT_TRUE(fs::exists(file));
    const SafetensorsFile st = SafetensorsFile::open(file);
    EXPECT_EQ(*st.metadata_value("bucket"), "64x32");
    EXPECT_EQ(*st.metadata_value("flip_y"), "true");
    EXPECT_EQ(*st.metadata_value("model"), "sd15-test");
    EXPECT_EQ(*st.metadata_value("content_sha256"), d.images[0].content_hash);
    // No temporary files left behind by the atomic write.
    EXPECT_EQ(std::distance(fs::directory_iterator(file.parent_path()), fs::directory_iterator()),
              1);

    LatentCache fresh("sd15-test", true, true);
    const at::Tensor again = fresh.get(d.images[0], {64, 32}, false, true, vae.fn());
    EXPECT_EQ(vae.calls, 1);  // read from disk, not encoded
    EXPECT_TRUE(torch::equal(again, first));
    EXPECT_EQ(fresh.stats().disk_hits, 1u);
    fresh.get(d.images[0], {64, 32}, false, true, vae.fn());
    EXPECT_EQ(fresh.stats().memory_hits, 1u);
}

TEST(LatentCache, StaleOrBrokenDiskFilesAreRebuilt) {
    TempDir dir;
    const ScannedDataset d = one_image(dir);
    FakeVae vae;
    LatentCache cache("sd15-test", false, true);
    const at::Tensor good = cache.get(d.images[0], {64, 32}, false, false, vae.fn());
    const fs::path file =
        LatentCache::disk_path(d.images[0], cache.key_for(d.images[0], {64, 32}, false, false));

    // Same file name, metadata of another model: stale.
    write_tensors(file, {{"latent", torch::zeros({3, 4, 8})}},
                  {{"format", "loom.latent_cache.v1"}, {"model", "other"}});
    const at::Tensor rebuilt = cache.get(d.images[0], {64, 32}, false, false, vae.fn());
    EXPECT_EQ(vae.calls, 2);
    EXPECT_TRUE(torch::equal(rebuilt, good));
    EXPECT_EQ(cache.stats().rebuilt, 1u);
    EXPECT_EQ(*SafetensorsFile::open(file).metadata_value("model"), "sd15-test");

    // Truncated file: rebuilt too.
    const std::string bytes = test::read_file(file);
    test::write_file(file, bytes.substr(0, bytes.size() / 2));
    EXPECT_TRUE(torch::equal(cache.get(d.images[0], {64, 32}, false, false, vae.fn()), good));
    EXPECT_EQ(vae.calls, 3);
    EXPECT_EQ(cache.stats().rebuilt, 2u);

    // Intact again: a disk hit.
    cache.get(d.images[0], {64, 32}, false, false, vae.fn());
    EXPECT_EQ(vae.calls, 3);
}

TEST(LatentCache, ChangedImageContentGetsANewEntry) {
    TempDir dir;
    FakeVae vae;
    LatentCache cache("sd15-test", true, true);
    const ScannedDataset before = one_image(dir, 0);
    const at::Tensor a = cache.get(before.images[0], {64, 32}, false, false, vae.fn());
    const ScannedDataset after = one_image(dir, 99);  // same name, new pixels, rescanned
    ASSERT_NE(after.images[0].content_hash, before.images[0].content_hash);
    const at::Tensor b = cache.get(after.images[0], {64, 32}, false, false, vae.fn());
    EXPECT_EQ(vae.calls, 2);
    EXPECT_FALSE(torch::equal(a, b));
    EXPECT_EQ(std::distance(fs::directory_iterator(dir / "img" / "_latent_cache"),
                            fs::directory_iterator()),
              2);

    // Changed after the scan: encoded from the current bytes, but not stored under the old key.
    fs::remove_all(dir / "img" / "_latent_cache");
    test::write_file(dir / "img" / "cat.png", encode_png(test::pattern_image(64, 32, 7)));
    LatentCache fresh("sd15-test", true, true);
    const at::Tensor c = fresh.get(after.images[0], {64, 32}, false, false, vae.fn());
    EXPECT_EQ(vae.calls, 3);
    EXPECT_FALSE(torch::equal(c, b));
    EXPECT_EQ(fresh.memory_entries(), 0u);
    EXPECT_FALSE(fs::exists(dir / "img" / "_latent_cache"));
}

TEST(LatentCache, CachedTensorsAreHostResidentOnTheSimDevice) {
    TempDir dir;
    const ScannedDataset d = one_image(dir);
    auto device = open_device({DeviceKind::kSim}, 64ull << 20);
    LatentCache cache("sd15-test", true, false);
    at::Tensor on_device;
    const at::Tensor cached =
        cache.get(d.images[0], {64, 32}, false, false, [&](const at::Tensor& image) {
            EXPECT_FALSE(SimAllocator::is_device_resident(image));  // loader buffer: host
            on_device = device->to_device(image);
            EXPECT_TRUE(SimAllocator::is_device_resident(on_device));
            return at::avg_pool2d(on_device.unsqueeze(0), 8).squeeze(0);
        });
    EXPECT_FALSE(SimAllocator::is_device_resident(cached));
    on_device.reset();
    EXPECT_EQ(device->stats().allocated, 0u);  // only host memory remains
}

TEST(TextEmbeddingCache, KeyedByCaptionAndModelInRamAndOnDisk) {
    TempDir dir;
    int calls = 0;
    // A typed conditioning: a token context and a pooled embedding of other shapes.
    auto encode = [&](const std::string& caption) {
        ++calls;
        return NamedTensors{{"context", torch::full({3, 4}, float(caption.size()))},
                            {"text_embeds", torch::full({5}, float(caption.size()) + 0.5f)}};
    };
    const auto same = [](const NamedTensors& a, const NamedTensors& b) {
        if (a.size() != b.size()) return false;
        for (const auto& [name, tensor] : a) {
            const auto it =
                std::find_if(b.begin(), b.end(), [&](const auto& e) { return e.first == name; });
            if (it == b.end() || !torch::equal(it->second, tensor)) return false;
        }
        return true;
    };
    NamedTensors first;
    {
        TextEmbeddingCache cache("clip-l", true, dir.path());
        first = cache.get("p3r5on, a hat", encode);
        ASSERT_EQ(first.size(), 2u);
        EXPECT_EQ(first[0].first, "context");
        EXPECT_EQ(first[0].second.sizes(), at::IntArrayRef({3, 4}));
        EXPECT_EQ(first[1].second.sizes(), at::IntArrayRef({5}));
        EXPECT_TRUE(same(cache.get("p3r5on, a hat", encode), first));
        cache.get("", encode);
        EXPECT_EQ(calls, 2);
        EXPECT_EQ(cache.stats().memory_hits, 1u);
        const fs::path file = *cache.disk_path("p3r5on, a hat");
        EXPECT_EQ(file, dir / "_t_e_cache" / (cache.key_for("p3r5on, a hat") + ".safetensors"));
        EXPECT_TRUE(fs::exists(file));
        EXPECT_EQ(*SafetensorsFile::open(file).metadata_value("caption"), "p3r5on, a hat");
    }
    TextEmbeddingCache reopened("clip-l", true, dir.path());
    EXPECT_TRUE(same(reopened.get("p3r5on, a hat", encode), first));  // both tensors, from disk
    EXPECT_EQ(calls, 2);
    EXPECT_EQ(reopened.stats().disk_hits, 1u);

    TextEmbeddingCache other_model("clip-g", true, dir.path());
    EXPECT_NE(other_model.key_for("p3r5on, a hat"), reopened.key_for("p3r5on, a hat"));
    other_model.get("p3r5on, a hat", encode);
    EXPECT_EQ(calls, 3);

    TextEmbeddingCache ram_only("clip-l", true, std::nullopt);
    EXPECT_FALSE(ram_only.disk_path("x"));
    ram_only.get("x", encode);
    ram_only.clear_memory();
    ram_only.get("x", encode);
    EXPECT_EQ(calls, 5);
}

}  // namespace
}  // namespace loom::data
