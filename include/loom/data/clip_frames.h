#pragma once

// Which frames of a video clip a training item takes, as ai-toolkit picks them
// (toolkit/dataloader_mixins.py: get_auto_frame_count and load_and_process_video). Pure: no
// decoding, no torch.
//
//   count: the dataset's num_frames; with auto_frame_count the clip's length in seconds at the
//     dataset's fps, int(total / source_fps * fps), snapped to 1 + k * temporal_compression
//     (trim_auto_frame_count_tail: never past the clip's end). Then capped by the plan's frames
//     (the ladder halves them) and kept at 1 + k * temporal_compression.
//   frames: with auto_frame_count and trim_auto_frame_count_tail, read at the dataset's fps from
//     the first frame, round(i * source_fps / fps); else with shrink_video_to_frames (the
//     default), or a clip shorter than count, spread over the whole clip,
//     round(i * (total - 1) / (count - 1)); else every round(source_fps / fps)-th frame from the
//     first (ai-toolkit starts at a random frame; loom at the first, so that a cached latent is
//     the clip's latent), spread instead when the clip is too short. Rounding is Python's
//     round(), half to even; no index passes the last frame.

#include <cstdint>
#include <vector>

namespace loom::config {
struct DatasetConfig;
}

namespace loom::data {

struct ClipSampling {
    std::int64_t num_frames = 1;
    bool shrink = true;  // shrink_video_to_frames
    double fps = 24;     // the dataset's fps
    bool auto_count = false;
    bool trim_tail = true;         // trim_auto_frame_count_tail
    int temporal_compression = 4;  // Wan's VAE: one latent frame per 4 frames after the first

    static ClipSampling from(const config::DatasetConfig& dataset, int temporal_compression);

    // The frames an item of a `total`-frame clip at `source_fps` trains on, at most
    // `max_frames` (the plan's), of the form 1 + k * temporal_compression.
    std::int64_t frames_for(std::int64_t total, double source_fps, std::int64_t max_frames) const;
    // Which `count` frames (ascending, possibly repeated when the clip is short). Throws
    // loom::Error when total or count is below 1.
    std::vector<std::int64_t> indices(std::int64_t total, double source_fps,
                                      std::int64_t count) const;
};

// ai-toolkit's get_auto_frame_count (see the top of this file).
std::int64_t auto_frame_count(std::int64_t total, double source_fps, double fps,
                              int temporal_compression, bool trim_tail);

// The longest count of the form 1 + k * temporal_compression not above `frames` (at least 1).
std::int64_t snap_frames(std::int64_t frames, int temporal_compression);

}  // namespace loom::data
