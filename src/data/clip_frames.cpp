#include "loom/data/clip_frames.h"

#include <algorithm>
#include <cmath>

#include "loom/config/job.h"
#include "loom/core/error.h"
#include "loom/core/py_round.h"

namespace loom::data {

namespace {}  // namespace

ClipSampling ClipSampling::from(const config::DatasetConfig& dataset, int temporal_compression) {
    ClipSampling s;
    s.num_frames = dataset.num_frames;
    s.shrink = dataset.shrink_video_to_frames;
    s.fps = dataset.fps;
    s.auto_count = dataset.auto_frame_count;
    s.trim_tail = dataset.trim_auto_frame_count_tail;
    s.temporal_compression = std::max(1, temporal_compression);
    return s;
}

std::int64_t snap_frames(std::int64_t frames, int temporal_compression) {
    const std::int64_t t = std::max(1, temporal_compression);
    return frames < 1 ? 1 : (frames - 1) / t * t + 1;
}

std::int64_t auto_frame_count(std::int64_t total, double source_fps, double fps,
                              int temporal_compression, bool trim_tail) {
    const std::int64_t t = std::max(1, temporal_compression);
    const double seconds = source_fps > 0 ? static_cast<double>(total) / source_fps : 0.0;
    std::int64_t desired = static_cast<std::int64_t>(seconds * fps);
    // Trimming keeps the key frame inside the clip: never a frame past its end.
    desired = trim_tail ? std::max<std::int64_t>(0, desired - 1) / t * t : desired / t * t;
    return desired + 1;
}

std::int64_t ClipSampling::frames_for(std::int64_t total, double source_fps,
                                      std::int64_t max_frames) const {
    const std::int64_t count =
        auto_count ? auto_frame_count(total, source_fps, fps, temporal_compression, trim_tail)
                   : num_frames;
    return snap_frames(std::min(count, max_frames), temporal_compression);
}

std::vector<std::int64_t> ClipSampling::indices(std::int64_t total, double source_fps,
                                                std::int64_t count) const {
    if (total < 1 || count < 1)
        throw Error("a clip of " + std::to_string(total) + " frames cannot give " +
                    std::to_string(count) + " frames");
    const std::int64_t last = total - 1;
    const double ratio = source_fps > 0 && fps > 0 ? source_fps / fps : 1.0;
    std::vector<std::int64_t> out;
    out.reserve(static_cast<std::size_t>(count));
    const auto at = [&](double step) {
        for (std::int64_t i = 0; i < count; ++i)
            out.push_back(std::min(py_round(static_cast<double>(i) * step), last));
        return out;
    };
    if (auto_count && trim_tail) return at(ratio);
    const double spread =
        count > 1 ? static_cast<double>(last) / static_cast<double>(count - 1) : 0;
    if (shrink || total < count) return at(spread);
    const std::int64_t interval = std::max<std::int64_t>(1, py_round(ratio));
    if (total / interval < count) return at(spread);
    return at(static_cast<double>(interval));
}

}  // namespace loom::data
