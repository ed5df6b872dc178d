#pragma once

// Video clips for video datasets (ai-toolkit's `num_frames` > 1): .mp4, .webm, .mov and .mkv
// files decoded with FFmpeg's libraries (libavformat, libavcodec, libswscale). A file that
// cannot be used — unreadable, without a video stream, truncated, or without a single frame — is
// a FormatError naming it and what to do, never a crash or a silently shorter clip. Built
// without FFmpeg, video_supported() is false and the readers throw saying what to install.

#include <cstdint>
#include <filesystem>
#include <vector>

#include "loom/data/image.h"

namespace loom::data {

bool video_supported();

// .mp4, .webm, .mov, .mkv in any case.
bool is_video_name(const std::filesystem::path& path);

struct VideoInfo {
    int width = 0;
    int height = 0;
    std::int64_t frames = 0;  // decoded, not the container's estimate
    double fps = 0;           // the stream's average frame rate
};

// Decodes the whole clip once (as datasets read images whole, so bad files show up before
// training) and counts its frames. IoError when the file cannot be opened, FormatError when it
// is not a video loom can decode, is truncated (fewer frames than its container declares, or a
// decoding error), or has no frame.
VideoInfo probe_video(const std::filesystem::path& path);

// The frames at `indices` (ascending, each below the clip's frame count), as RGB images at the
// clip's size. Throws as probe_video, and FormatError when an index is past the last frame.
std::vector<Image> read_video_frames(const std::filesystem::path& path,
                                     const std::vector<std::int64_t>& indices);

}  // namespace loom::data
