#pragma once

// Test videos written with FFmpeg's encoders: lossless FFV1 in Matroska (frames read back
// exactly) or MPEG-4 Part 2 in MP4 (the common container), from RGB frames.

#include <filesystem>
#include <string>
#include <vector>

#include "loom/data/image.h"

namespace loom::testing {

// Writes `frames` (one size, even sides) at `fps` to `path`, whose extension picks the
// container (.mkv, .mp4, .webm, .mov); `codec` is an FFmpeg encoder name ("ffv1", "mpeg4").
void write_test_video(const std::filesystem::path& path, const std::vector<data::Image>& frames,
                      int fps, const std::string& codec);

// Frames with a distinct colour ramp each (frame i's red channel starts at 20 * i).
std::vector<data::Image> ramp_frames(int count, int width, int height);

}  // namespace loom::testing
