#include "loom/data/video.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <memory>
#include <string>

#include "loom/core/error.h"

#ifndef LOOM_HAVE_FFMPEG
#define LOOM_HAVE_FFMPEG 0
#endif
#if LOOM_HAVE_FFMPEG
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>
}
#endif

namespace loom::data {

bool video_supported() {
    return LOOM_HAVE_FFMPEG != 0;
}

bool is_video_name(const std::filesystem::path& path) {
    std::string ext = path.extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return ext == ".mp4" || ext == ".webm" || ext == ".mov" || ext == ".mkv";
}

#if LOOM_HAVE_FFMPEG

namespace {

std::string av_message(int code) {
    char buffer[AV_ERROR_MAX_STRING_SIZE] = {};
    av_strerror(code, buffer, sizeof(buffer));
    return buffer;
}

[[noreturn]] void bad_video(const std::filesystem::path& path, const std::string& what) {
    throw FormatError(path.string(),
                      what + "; re-export the clip (H.264 in .mp4 or VP9 in .webm) or remove it");
}

// One open clip: its container, its first video stream's decoder and a converter to RGB24.
class Clip {
  public:
    explicit Clip(const std::filesystem::path& path) : path_(path) {
        // loom reports what went wrong itself, naming the file; FFmpeg's own log is noise.
        av_log_set_level(AV_LOG_QUIET);
        std::error_code ec;
        if (!std::filesystem::is_regular_file(path, ec)) {
            throw IoError(path.string(), "cannot be read (not a file)");
        }
        int rc = avformat_open_input(&format_, path.c_str(), nullptr, nullptr);
        if (rc < 0) bad_video(path, "is not a video loom can read (" + av_message(rc) + ")");
        rc = avformat_find_stream_info(format_, nullptr);
        if (rc < 0) bad_video(path, "has no readable streams (" + av_message(rc) + ")");
        stream_ = av_find_best_stream(format_, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
        if (stream_ < 0) bad_video(path, "has no video stream");
        const AVStream* s = format_->streams[stream_];
        const AVCodec* codec = avcodec_find_decoder(s->codecpar->codec_id);
        if (codec == nullptr) {
            bad_video(path, std::string("uses a codec this FFmpeg cannot decode (") +
                                avcodec_get_name(s->codecpar->codec_id) + ")");
        }
        decoder_ = avcodec_alloc_context3(codec);
        if (decoder_ == nullptr || avcodec_parameters_to_context(decoder_, s->codecpar) < 0 ||
            avcodec_open2(decoder_, codec, nullptr) < 0) {
            bad_video(path, std::string("cannot open its ") + codec->name + " decoder");
        }
        declared_frames_ = s->nb_frames;
        if (format_->duration > 0) declared_seconds_ = format_->duration / double(AV_TIME_BASE);
        const AVRational rate = s->avg_frame_rate.num > 0 ? s->avg_frame_rate : s->r_frame_rate;
        fps_ = rate.den > 0 ? av_q2d(rate) : 0.0;
        packet_ = av_packet_alloc();
        frame_ = av_frame_alloc();
    }
    ~Clip() {
        sws_freeContext(scaler_);
        av_frame_free(&frame_);
        av_packet_free(&packet_);
        avcodec_free_context(&decoder_);
        avformat_close_input(&format_);
    }
    Clip(const Clip&) = delete;
    Clip& operator=(const Clip&) = delete;

    // Decodes every frame in order, calling `on_frame(index)` for each; `rgb()` is the frame
    // while it runs. Returns the number of frames. Stops early when on_frame returns false.
    template <class OnFrame>
    std::int64_t decode_all(OnFrame&& on_frame) {
        std::int64_t index = 0;
        bool more = true;
        const auto drain = [&]() {
            for (;;) {
                const int rc = avcodec_receive_frame(decoder_, frame_);
                if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return;
                if (rc < 0) {
                    bad_video(path_, "is corrupt: frame " + std::to_string(index) +
                                         " cannot be decoded (" + av_message(rc) + ")");
                }
                if (more) more = on_frame(index);
                ++index;
            }
        };
        int rc = 0;
        while (more && (rc = av_read_frame(format_, packet_)) >= 0) {
            if (packet_->stream_index == stream_) {
                const int sent = avcodec_send_packet(decoder_, packet_);
                if (sent < 0 && sent != AVERROR(EAGAIN)) {
                    av_packet_unref(packet_);
                    bad_video(path_, "is corrupt near frame " + std::to_string(index) + " (" +
                                         av_message(sent) + ")");
                }
                drain();
            }
            av_packet_unref(packet_);
        }
        if (more && rc != AVERROR_EOF) {
            bad_video(path_, "is truncated or unreadable after frame " + std::to_string(index) +
                                 " (" + av_message(rc) + ")");
        }
        if (more) {
            avcodec_send_packet(decoder_, nullptr);  // flush the decoder's delayed frames
            drain();
        }
        return index;
    }

    Image rgb() {
        const int w = frame_->width;
        const int h = frame_->height;
        scaler_ =
            sws_getCachedContext(scaler_, w, h, static_cast<AVPixelFormat>(frame_->format), w, h,
                                 AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr, nullptr, nullptr);
        if (scaler_ == nullptr)
            bad_video(path_, "has frames in a pixel format loom cannot convert");
        Image out(w, h);
        std::uint8_t* planes[4] = {out.pixels.data(), nullptr, nullptr, nullptr};
        int strides[4] = {w * 3, 0, 0, 0};
        sws_scale(scaler_, frame_->data, frame_->linesize, 0, h, planes, strides);
        return out;
    }

    int width() const { return decoder_->width; }
    int height() const { return decoder_->height; }
    double fps() const { return fps_; }
    std::int64_t declared_frames() const { return declared_frames_; }
    double declared_seconds() const { return declared_seconds_; }

  private:
    std::filesystem::path path_;
    AVFormatContext* format_ = nullptr;
    AVCodecContext* decoder_ = nullptr;
    AVPacket* packet_ = nullptr;
    AVFrame* frame_ = nullptr;
    SwsContext* scaler_ = nullptr;
    int stream_ = -1;
    std::int64_t declared_frames_ = 0;
    double declared_seconds_ = 0;
    double fps_ = 0;
};

}  // namespace

VideoInfo probe_video(const std::filesystem::path& path) {
    Clip clip(path);
    VideoInfo info;
    info.frames = clip.decode_all([](std::int64_t) { return true; });
    if (info.frames == 0) bad_video(path, "has no frames");
    if (clip.declared_frames() > info.frames) {
        bad_video(path, "is truncated: " + std::to_string(info.frames) + " of the " +
                            std::to_string(clip.declared_frames()) +
                            " frames its container declares could be decoded");
    }
    // Containers that declare no frame count (Matroska, WebM) declare a duration: a clip that
    // decodes to clearly less than it is cut short, not a shorter clip.
    const double expected = clip.declared_seconds() * clip.fps();
    if (clip.declared_frames() <= 0 && expected > 0 &&
        static_cast<double>(info.frames) < expected - std::max(2.0, 0.05 * expected)) {
        bad_video(path, "is truncated: " + std::to_string(info.frames) + " frames decode, its " +
                            std::to_string(clip.declared_seconds()) + " s at " +
                            std::to_string(clip.fps()) + " fps declare about " +
                            std::to_string(std::llround(expected)));
    }
    info.width = clip.width();
    info.height = clip.height();
    info.fps = clip.fps();
    return info;
}

std::vector<Image> read_video_frames(const std::filesystem::path& path,
                                     const std::vector<std::int64_t>& indices) {
    if (!std::is_sorted(indices.begin(), indices.end())) {
        throw Error("read_video_frames: the frame indices must be ascending");
    }
    Clip clip(path);
    std::vector<Image> frames;
    std::size_t next = 0;
    clip.decode_all([&](std::int64_t index) {
        while (next < indices.size() && indices[next] == index) {
            frames.push_back(clip.rgb());  // an index asked twice gets the frame twice
            ++next;
        }
        return next < indices.size();
    });
    if (frames.size() != indices.size()) {
        bad_video(path, "has fewer frames than frame " + std::to_string(indices[frames.size()]) +
                            " that training needs; it changed since the dataset was scanned?");
    }
    return frames;
}

#else

VideoInfo probe_video(const std::filesystem::path& path) {
    throw FormatError(path.string(),
                      "this loom was built without FFmpeg, so it cannot read videos; install "
                      "libavformat-dev, libavcodec-dev and libswscale-dev and rebuild loom");
}

std::vector<Image> read_video_frames(const std::filesystem::path& path,
                                     const std::vector<std::int64_t>&) {
    probe_video(path);
    return {};
}

#endif

}  // namespace loom::data
