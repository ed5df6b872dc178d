// Which frames of a clip a training item takes (data/clip_frames.h). The expected values are
// ai-toolkit's: toolkit/dataloader_mixins.py (get_auto_frame_count, load_and_process_video)
// evaluated in Python for the same clips, Python's round() included.

#include <gtest/gtest.h>

#include "loom/config/job.h"
#include "loom/core/error.h"
#include "loom/data/clip_frames.h"

namespace loom::data {
namespace {

using Frames = std::vector<std::int64_t>;

ClipSampling sampling(std::int64_t num_frames, bool shrink, double fps) {
    ClipSampling s;
    s.num_frames = num_frames;
    s.shrink = shrink;
    s.fps = fps;
    return s;
}

TEST(ClipFrames, ShrinkSpreadsOverTheWholeClipRoundingHalfToEven) {
    const ClipSampling s = sampling(5, true, 24);
    EXPECT_EQ(s.indices(10, 24, 5), (Frames{0, 2, 4, 7, 9}));  // 4.5 -> 4, 6.75 -> 7
    EXPECT_EQ(s.indices(81, 24, 1), (Frames{0}));
    EXPECT_EQ(s.indices(12, 24, 9), (Frames{0, 1, 3, 4, 6, 7, 8, 10, 11}));  // 5.5 -> 6
    // A clip shorter than the frames asked for repeats frames (0.5 -> 0, 1.5 -> 2).
    EXPECT_EQ(s.indices(3, 24, 5), (Frames{0, 0, 1, 2, 2}));
}

TEST(ClipFrames, AtTheDatasetFpsFromTheFirstFrameOrSpreadWhenTooShort) {
    // A 24 fps clip read at 12: every other frame; 30 at 16: every round(1.875) = 2nd.
    EXPECT_EQ(sampling(3, false, 12).indices(100, 24, 3), (Frames{0, 2, 4}));
    EXPECT_EQ(sampling(5, false, 16).indices(100, 30, 5), (Frames{0, 2, 4, 6, 8}));
    // 4 frames two apart need 8 frames; a 5-frame clip is spread instead.
    EXPECT_EQ(sampling(4, false, 12).indices(5, 24, 4), (Frames{0, 1, 3, 4}));
    EXPECT_THROW(sampling(4, true, 12).indices(0, 24, 4), Error);
    EXPECT_THROW(sampling(4, true, 12).indices(10, 24, 0), Error);
}

TEST(ClipFrames, AutoFrameCountIsTheClipsLengthAtTheDatasetFps) {
    // 48 frames at 30 fps is 1.6 s: 25.6 frames at 16 fps -> 25 (trimmed: 24 // 4 * 4 + 1).
    EXPECT_EQ(auto_frame_count(48, 30, 16, 4, true), 25);
    EXPECT_EQ(auto_frame_count(48, 30, 16, 4, false), 25);
    // 100 frames at 24 read at 24: trimming stays inside the clip (97), not trimming passes it.
    EXPECT_EQ(auto_frame_count(100, 24, 24, 4, true), 97);
    EXPECT_EQ(auto_frame_count(100, 24, 24, 4, false), 101);
    EXPECT_EQ(auto_frame_count(3, 24, 24, 4, true), 1);
    // Trimmed, the frames are read at the dataset fps from the first frame (7.5 -> 8).
    ClipSampling s = sampling(81, true, 16);
    s.auto_count = true;
    EXPECT_EQ(s.frames_for(48, 30, 81), 25);
    EXPECT_EQ(s.indices(48, 30, 9), (Frames{0, 2, 4, 6, 8, 9, 11, 13, 15}));
    // Not trimmed, the count is spread over the clip as shrink_video_to_frames does.
    s.trim_tail = false;
    EXPECT_EQ(s.indices(48, 30, 5), (Frames{0, 12, 24, 35, 47}));  // 23.5 -> 24, 35.25 -> 35
}

TEST(ClipFrames, TheCapAndTheVaeKeepCountsAtOnePlusFourK) {
    const ClipSampling s = sampling(9, true, 24);
    EXPECT_EQ(s.frames_for(100, 24, 9), 9);
    EXPECT_EQ(s.frames_for(100, 24, 5), 5);  // the ladder's cap
    EXPECT_EQ(s.frames_for(100, 24, 8), 5);  // a cap between counts rounds down
    EXPECT_EQ(s.frames_for(100, 24, 1), 1);
    // A clip shorter than num_frames still trains on num_frames (frames repeat, as ai-toolkit).
    EXPECT_EQ(s.frames_for(3, 24, 81), 9);
    EXPECT_EQ(snap_frames(40, 4), 37);
    EXPECT_EQ(snap_frames(41, 4), 41);
    EXPECT_EQ(snap_frames(4, 4), 1);
    EXPECT_EQ(snap_frames(0, 4), 1);
    EXPECT_EQ(snap_frames(7, 1), 7);  // an image family: any count
}

TEST(ClipFrames, FromTheDatasetKeys) {
    config::DatasetConfig d;
    d.num_frames = 17;
    d.shrink_video_to_frames = false;
    d.fps = 16;
    d.auto_frame_count = true;
    d.trim_auto_frame_count_tail = false;
    const ClipSampling s = ClipSampling::from(d, 4);
    EXPECT_EQ(s.num_frames, 17);
    EXPECT_FALSE(s.shrink);
    EXPECT_EQ(s.fps, 16);
    EXPECT_TRUE(s.auto_count);
    EXPECT_FALSE(s.trim_tail);
    EXPECT_EQ(s.temporal_compression, 4);
}

}  // namespace
}  // namespace loom::data
