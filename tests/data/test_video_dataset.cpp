// Video datasets: clips found and checked by the scan beside the images (bad ones skipped with
// one warning each), a clip item's frames fitted into its bucket as [3, F, H, W], and latents
// cached per clip and per choice of frames.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>

#include "data_test_util.h"
#include "loom/core/error.h"
#include "loom/data/clip_frames.h"
#include "loom/data/dataset.h"
#include "loom/data/image_tensor.h"
#include "loom/data/tensor_cache.h"
#include "loom/data/video.h"
#include "video_fixture.h"

namespace loom::data {
namespace {

namespace fs = std::filesystem;
using testing::ramp_frames;
using testing::write_test_video;

class VideoDataset : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!video_supported()) GTEST_SKIP() << "built without FFmpeg";
        const fs::path folder = dir_ / "clips";
        fs::create_directories(folder);
        frames_ = ramp_frames(12, 32, 24);
        write_test_video(folder / "a.mkv", frames_, 8, "ffv1");
        test::write_file(folder / "a.txt", "a red ramp");
        write_test_video(folder / "b.MP4", ramp_frames(9, 32, 32), 24, "mpeg4");
        test::write_file(folder / "c.png", encode_png(test::pattern_image(40, 24)));
        write_test_video(folder / "d.mkv", ramp_frames(40, 32, 32), 16, "ffv1");
        fs::resize_file(folder / "d.mkv", fs::file_size(folder / "d.mkv") / 2);  // truncated
        test::write_file(folder / "notes.mp4", "not a video");
        test::write_file(folder / "empty.webm", "");
    }
    config::DatasetConfig video_config() const {
        config::DatasetConfig c = test::dataset_config(dir_ / "clips");
        c.num_frames = 5;
        return c;
    }
    test::TempDir dir_;
    std::vector<Image> frames_;
};

TEST_F(VideoDataset, ScanFindsClipsAndImagesAndSkipsBadClipsWithOneWarningEach) {
    test::WarningLog log;
    const ScannedDataset d = scan_dataset(video_config(), log.options());
    ASSERT_EQ(d.images.size(), 3u);
    EXPECT_EQ(d.skipped, 3u);
    const ImageRecord& a = d.images[0];
    EXPECT_EQ(a.path.filename(), "a.mkv");
    ASSERT_TRUE(a.is_clip());
    EXPECT_EQ(a.video->frames, 12);
    EXPECT_NEAR(a.video->fps, 8.0, 1e-6);
    EXPECT_EQ(a.width, 32);
    EXPECT_EQ(a.height, 24);
    EXPECT_EQ(a.caption, "a red ramp");
    EXPECT_EQ(a.content_hash.size(), 64u);
    EXPECT_EQ(d.images[1].path.filename(), "b.MP4");
    EXPECT_TRUE(d.images[1].is_clip());
    EXPECT_EQ(d.images[1].video->frames, 9);
    EXPECT_EQ(d.images[2].path.filename(), "c.png");
    EXPECT_FALSE(d.images[2].is_clip());  // an image of a video dataset: a one-frame clip

    const std::vector<std::string> messages = log.messages();
    ASSERT_EQ(messages.size(), 3u);
    auto warned = [&](const char* name, const char* why) {
        return std::any_of(messages.begin(), messages.end(), [&](const std::string& m) {
            return m.find(name) != std::string::npos && m.find(why) != std::string::npos;
        });
    };
    EXPECT_TRUE(warned("d.mkv", "truncated")) << ::testing::PrintToString(messages);
    EXPECT_TRUE(warned("notes.mp4", "re-export the clip")) << ::testing::PrintToString(messages);
    EXPECT_TRUE(warned("empty.webm", "empty")) << ::testing::PrintToString(messages);
}

TEST_F(VideoDataset, AnImageDatasetLeavesClipsAlone) {
    test::WarningLog log;
    const ScannedDataset d = scan_dataset(test::dataset_config(dir_ / "clips"), log.options());
    ASSERT_EQ(d.images.size(), 1u);
    EXPECT_EQ(d.images[0].path.filename(), "c.png");
    EXPECT_EQ(d.skipped, 0u);
    EXPECT_TRUE(log.messages().empty());
}

TEST_F(VideoDataset, OnlyBadClipsIsADatasetErrorSayingWhatIsMissing) {
    const fs::path folder = dir_ / "bad";
    test::write_file(folder / "x.mp4", "not a video");
    config::DatasetConfig c = test::dataset_config(folder);
    c.auto_frame_count = true;
    try {
        scan_dataset(c);
        FAIL() << "a dataset of unreadable clips was accepted";
    } catch (const DatasetError& e) {
        EXPECT_NE(std::string(e.what()).find("none of the 1 images or clips"), std::string::npos)
            << e.what();
    }
}

TEST_F(VideoDataset, AClipItemIsItsChosenFramesFittedAndFlipped) {
    const ScannedDataset d = scan_dataset(video_config());
    const ImageRecord& a = d.images[0];
    const ClipSampling s = ClipSampling::from(video_config(), 4);
    const std::vector<std::int64_t> picked = s.indices(a.video->frames, a.video->fps, 5);
    ASSERT_EQ(picked, (std::vector<std::int64_t>{0, 3, 6, 8, 11}));  // 2.75 -> 3, 8.25 -> 8
    const BucketSize bucket{16, 16, 5};
    const at::Tensor clip = load_item_tensor(a, bucket, true, false, picked);
    ASSERT_EQ(clip.sizes(), (at::IntArrayRef{3, 5, 16, 16}));
    for (std::size_t f = 0; f < picked.size(); ++f) {
        const at::Tensor want = fitted_tensor(frames_[std::size_t(picked[f])], bucket, true, false);
        EXPECT_TRUE(at::equal(clip.select(1, std::int64_t(f)), want)) << "frame " << f;
    }
    // One frame (the ladder's last): an image's shape, the first chosen frame.
    const at::Tensor one = load_item_tensor(a, {16, 16, 1}, false, false, {0});
    EXPECT_EQ(one.sizes(), (at::IntArrayRef{3, 16, 16}));
    EXPECT_TRUE(at::equal(one, fitted_tensor(frames_[0], {16, 16, 1}, false, false)));
}

TEST_F(VideoDataset, LatentsAreCachedPerClipAndPerChoiceOfFrames) {
    const ScannedDataset d = scan_dataset(video_config());
    const ImageRecord& a = d.images[0];
    LatentCache cache("tiny-wan", true, true);
    int calls = 0;
    const LatentCache::Encode encode = [&](const at::Tensor& pixels) {
        ++calls;
        EXPECT_EQ(pixels.dim(), 4);  // [3, F, H, W]
        return pixels.mean(1);
    };
    const std::vector<std::int64_t> five = {0, 3, 6, 8, 11};
    const at::Tensor first = cache.get(a, {16, 16, 5}, false, false, encode, five);
    const at::Tensor again = cache.get(a, {16, 16, 5}, false, false, encode, five);
    EXPECT_EQ(calls, 1);
    EXPECT_TRUE(at::equal(first, again));
    const LatentKey key = cache.key_for(a, {16, 16, 5}, false, false, five);
    EXPECT_TRUE(fs::exists(LatentCache::disk_path(a, key)));
    // Other frames (after the ladder halved them, or another fps) are another entry.
    cache.get(a, {16, 16, 5}, false, false, encode, {0, 2, 4, 6, 8});
    EXPECT_EQ(calls, 2);
    EXPECT_NE(key.key(), cache.key_for(a, {16, 16, 5}, false, false, {0, 2, 4, 6, 8}).key());
    // A fresh cache reads the file back.
    LatentCache reread("tiny-wan", false, true);
    EXPECT_TRUE(at::equal(reread.get(a, {16, 16, 5}, false, false, encode, five), first));
    EXPECT_EQ(calls, 2);
    EXPECT_EQ(reread.stats().disk_hits, 1u);
}

}  // namespace
}  // namespace loom::data
