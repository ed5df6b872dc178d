// Video clips (data/video.h): decoding through FFmpeg frame for frame, and every unusable file a
// FormatError naming it — truncated, empty, not a video.

#include <gtest/gtest.h>

#include <fstream>

#include "loom/core/error.h"
#include "loom/data/video.h"
#include "temp_dir.h"
#include "video_fixture.h"

namespace loom::data {
namespace {

using testing::ramp_frames;
using testing::write_test_video;

TEST(VideoFiles, NamesByExtensionInAnyCase) {
    EXPECT_TRUE(is_video_name("a/clip.MP4"));
    EXPECT_TRUE(is_video_name("clip.webm"));
    EXPECT_TRUE(is_video_name("clip.mov"));
    EXPECT_TRUE(is_video_name("clip.mkv"));
    EXPECT_FALSE(is_video_name("clip.gif"));
    EXPECT_FALSE(is_video_name("clip.png"));
}

class VideoDecoding : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!video_supported()) GTEST_SKIP() << "built without FFmpeg";
    }
    test::TempDir dir_;
};

TEST_F(VideoDecoding, LosslessClipReadsBackFrameForFrame) {
    const auto frames = ramp_frames(6, 16, 12);
    write_test_video(dir_ / "clip.mkv", frames, 8, "ffv1");
    const VideoInfo info = probe_video(dir_ / "clip.mkv");
    EXPECT_EQ(info.frames, 6);
    EXPECT_EQ(info.width, 16);
    EXPECT_EQ(info.height, 12);
    EXPECT_NEAR(info.fps, 8.0, 1e-6);
    const auto back = read_video_frames(dir_ / "clip.mkv", {0, 3, 3, 5});
    ASSERT_EQ(back.size(), 4u);
    EXPECT_EQ(back[0].pixels, frames[0].pixels);
    EXPECT_EQ(back[1].pixels, frames[3].pixels);
    EXPECT_EQ(back[2].pixels, frames[3].pixels);
    EXPECT_EQ(back[3].pixels, frames[5].pixels);
}

TEST_F(VideoDecoding, Mp4ClipDecodesEveryFrame) {
    const auto frames = ramp_frames(9, 32, 32);
    write_test_video(dir_ / "clip.mp4", frames, 24, "mpeg4");
    const VideoInfo info = probe_video(dir_ / "clip.mp4");
    EXPECT_EQ(info.frames, 9);
    EXPECT_NEAR(info.fps, 24.0, 1e-6);
    const auto last = read_video_frames(dir_ / "clip.mp4", {8});
    ASSERT_EQ(last.size(), 1u);
    double error = 0;
    for (std::size_t i = 0; i < last[0].pixels.size(); ++i) {
        error += std::abs(int(last[0].pixels[i]) - int(frames[8].pixels[i]));
    }
    EXPECT_LT(error / static_cast<double>(last[0].pixels.size()), 12.0);  // lossy, but that frame
}

// Cut to half its bytes, a clip is an error naming it — never a shorter clip.
TEST_F(VideoDecoding, TruncatedClipsAreFormatErrors) {
    for (const char* name : {"long.mkv", "long.mp4"}) {
        SCOPED_TRACE(name);
        const std::filesystem::path path = dir_ / name;
        write_test_video(path, ramp_frames(40, 32, 32), 16,
                         std::string(name).find(".mkv") != std::string::npos ? "ffv1" : "mpeg4");
        std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
        try {
            const VideoInfo info = probe_video(path);
            FAIL() << "a truncated clip read as " << info.frames << " frames";
        } catch (const FormatError& e) {
            EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
        }
    }
}

TEST_F(VideoDecoding, EmptyMissingAndNonVideoFilesAreClearErrors) {
    write_test_video(dir_ / "empty.mkv", {}, 8, "ffv1");
    try {
        probe_video(dir_ / "empty.mkv");
        FAIL() << "a clip without frames was read";
    } catch (const FormatError& e) {
        // Matroska without a frame ends before its first cluster: refused at open, by name.
        const std::string what = e.what();
        EXPECT_NE(what.find("empty.mkv"), std::string::npos) << what;
        EXPECT_TRUE(what.find("has no frames") != std::string::npos ||
                    what.find("is not a video loom can read") != std::string::npos)
            << what;
    }
    std::ofstream(dir_ / "notes.mp4") << "not a video at all";
    try {
        probe_video(dir_ / "notes.mp4");
        FAIL() << "text was read as a video";
    } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("notes.mp4"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("re-export the clip"), std::string::npos);
    }
    EXPECT_THROW(probe_video(dir_ / "missing.mp4"), IoError);
    write_test_video(dir_ / "short.mkv", ramp_frames(3, 16, 16), 8, "ffv1");
    EXPECT_THROW(read_video_frames(dir_ / "short.mkv", {1, 7}), FormatError);
}

}  // namespace
}  // namespace loom::data
