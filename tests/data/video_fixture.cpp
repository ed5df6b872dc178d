#include "video_fixture.h"

#include <stdexcept>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libswscale/swscale.h>
}

namespace loom::testing {

namespace {
void check(int rc, const char* what) {
    if (rc < 0) throw std::runtime_error(std::string("write_test_video: ") + what);
}
}  // namespace

std::vector<data::Image> ramp_frames(int count, int width, int height) {
    std::vector<data::Image> frames;
    for (int f = 0; f < count; ++f) {
        data::Image img(width, height);
        for (int y = 0; y < height; ++y) {
            for (int x = 0; x < width; ++x) {
                std::uint8_t* p = img.at(x, y);
                p[0] = static_cast<std::uint8_t>((20 * f + 3 * x) % 256);
                p[1] = static_cast<std::uint8_t>((7 * y) % 256);
                p[2] = static_cast<std::uint8_t>(200 - 10 * (f % 20));
            }
        }
        frames.push_back(std::move(img));
    }
    return frames;
}

void write_test_video(const std::filesystem::path& path, const std::vector<data::Image>& frames,
                      int fps, const std::string& codec_name) {
    AVFormatContext* format = nullptr;
    check(avformat_alloc_output_context2(&format, nullptr, nullptr, path.c_str()), "container");
    const AVCodec* codec = avcodec_find_encoder_by_name(codec_name.c_str());
    if (codec == nullptr) throw std::runtime_error("write_test_video: no encoder " + codec_name);
    AVStream* stream = avformat_new_stream(format, nullptr);
    AVCodecContext* enc = avcodec_alloc_context3(codec);
    // No frames: a valid container with an empty 16x16 stream.
    const int w = frames.empty() ? 16 : frames[0].width;
    const int h = frames.empty() ? 16 : frames[0].height;
    enc->width = w;
    enc->height = h;
    enc->time_base = AVRational{1, fps};
    enc->framerate = AVRational{fps, 1};
    enc->pix_fmt = codec_name == "ffv1" ? AV_PIX_FMT_BGR0 : AV_PIX_FMT_YUV420P;
    enc->gop_size = 4;
    if (format->oformat->flags & AVFMT_GLOBALHEADER) enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    check(avcodec_open2(enc, codec, nullptr), "encoder");
    check(avcodec_parameters_from_context(stream->codecpar, enc), "parameters");
    stream->time_base = enc->time_base;
    stream->avg_frame_rate = enc->framerate;
    check(avio_open(&format->pb, path.c_str(), AVIO_FLAG_WRITE), "open");
    check(avformat_write_header(format, nullptr), "header");
    SwsContext* scaler = sws_getContext(w, h, AV_PIX_FMT_RGB24, w, h, enc->pix_fmt, SWS_POINT,
                                        nullptr, nullptr, nullptr);
    AVFrame* frame = av_frame_alloc();
    frame->format = enc->pix_fmt;
    frame->width = w;
    frame->height = h;
    check(av_frame_get_buffer(frame, 0), "frame");
    AVPacket* packet = av_packet_alloc();
    const auto drain = [&]() {
        while (avcodec_receive_packet(enc, packet) == 0) {
            av_packet_rescale_ts(packet, enc->time_base, stream->time_base);
            packet->stream_index = stream->index;
            check(av_interleaved_write_frame(format, packet), "packet");
        }
    };
    for (std::size_t i = 0; i < frames.size(); ++i) {
        check(av_frame_make_writable(frame), "writable");
        const std::uint8_t* src[1] = {frames[i].pixels.data()};
        const int stride[1] = {w * 3};
        sws_scale(scaler, src, stride, 0, h, frame->data, frame->linesize);
        frame->pts = static_cast<int64_t>(i);
        check(avcodec_send_frame(enc, frame), "send");
        drain();
    }
    check(avcodec_send_frame(enc, nullptr), "flush");
    drain();
    check(av_write_trailer(format), "trailer");
    av_packet_free(&packet);
    av_frame_free(&frame);
    sws_freeContext(scaler);
    avcodec_free_context(&enc);
    avio_closep(&format->pb);
    avformat_free_context(format);
}

}  // namespace loom::testing
