#include "loom/data/animation.h"

#include <cstdint>
#include <cstring>

#include "loom/core/error.h"
#include "loom/io/atomic_file.h"

#ifndef LOOM_HAVE_WEBP_ANIM
#define LOOM_HAVE_WEBP_ANIM 0
#endif
#if LOOM_HAVE_WEBP_ANIM
#include <webp/demux.h>
#include <webp/encode.h>
#include <webp/mux.h>
#endif

namespace loom::data {

#if !LOOM_HAVE_WEBP_ANIM
namespace {
[[noreturn]] void no_animation() {
    throw Error(
        "this loom was built without libwebp's animation encoder (libwebpmux, libwebpdemux); "
        "install libwebp-dev and rebuild loom");
}
}  // namespace
#endif

bool animated_webp_supported() {
    return LOOM_HAVE_WEBP_ANIM != 0;
}

std::string encode_animated_webp(const std::vector<Image>& frames, int fps) {
    if (frames.empty()) throw Error("an animated WebP needs at least one frame");
    if (fps < 1)
        throw Error("an animated WebP needs a positive frame rate, got " + std::to_string(fps));
    for (const Image& f : frames) {
        if (f.width != frames[0].width || f.height != frames[0].height || f.empty()) {
            throw Error("the frames of an animated WebP must share one size (" +
                        std::to_string(frames[0].width) + "x" + std::to_string(frames[0].height) +
                        ")");
        }
    }
#if LOOM_HAVE_WEBP_ANIM
    WebPAnimEncoderOptions options;
    if (!WebPAnimEncoderOptionsInit(&options)) throw Error("libwebp version mismatch");
    options.anim_params.loop_count = 0;  // forever
    WebPAnimEncoder* encoder = WebPAnimEncoderNew(frames[0].width, frames[0].height, &options);
    if (encoder == nullptr) throw Error("animated WebP: the encoder could not be created");
    WebPConfig config;
    WebPConfigInit(&config);
    config.lossless = 1;
    WebPData data;
    WebPDataInit(&data);
    bool ok = true;
    // Frame i starts at i * 1000 / fps ms, rounded: the clip lasts frames / fps seconds.
    const auto start_ms = [fps](std::size_t i) {
        return static_cast<int>((static_cast<std::int64_t>(i) * 1000 + fps / 2) / fps);
    };
    for (std::size_t i = 0; i < frames.size() && ok; ++i) {
        const Image& f = frames[i];
        WebPPicture picture;
        WebPPictureInit(&picture);
        picture.use_argb = 1;
        picture.width = f.width;
        picture.height = f.height;
        ok = WebPPictureImportRGB(&picture, f.pixels.data(), f.width * 3) &&
             WebPAnimEncoderAdd(encoder, &picture, start_ms(i), &config);
        WebPPictureFree(&picture);
    }
    const int timestamp = start_ms(frames.size());
    ok = ok && WebPAnimEncoderAdd(encoder, nullptr, timestamp, nullptr) &&
         WebPAnimEncoderAssemble(encoder, &data);
    const std::string message = ok ? "" : WebPAnimEncoderGetError(encoder);
    WebPAnimEncoderDelete(encoder);
    if (!ok) {
        WebPDataClear(&data);
        throw Error("animated WebP encoding failed: " + message);
    }
    std::string out(reinterpret_cast<const char*>(data.bytes), data.size);
    WebPDataClear(&data);
    return out;
#else
    no_animation();
#endif
}

void write_animated_webp(const std::filesystem::path& path, const std::vector<Image>& frames,
                         int fps) {
    write_file_atomic(path, encode_animated_webp(frames, fps));
}

std::vector<Image> decode_animated_webp(std::string_view bytes, const std::string& name) {
#if LOOM_HAVE_WEBP_ANIM
    WebPData data{reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()};
    WebPAnimDecoderOptions options;
    if (!WebPAnimDecoderOptionsInit(&options)) throw Error("libwebp version mismatch");
    options.color_mode = MODE_RGBA;
    WebPAnimDecoder* decoder = WebPAnimDecoderNew(&data, &options);
    if (decoder == nullptr) throw FormatError(name, "is not a WebP file loom can read");
    WebPAnimInfo info;
    WebPAnimDecoderGetInfo(decoder, &info);
    std::vector<Image> frames;
    while (WebPAnimDecoderHasMoreFrames(decoder)) {
        std::uint8_t* rgba = nullptr;
        int timestamp = 0;
        if (!WebPAnimDecoderGetNext(decoder, &rgba, &timestamp)) {
            WebPAnimDecoderDelete(decoder);
            throw FormatError(name, "a frame of the animated WebP is truncated or corrupt");
        }
        Image frame(static_cast<int>(info.canvas_width), static_cast<int>(info.canvas_height));
        for (std::size_t p = 0; p < frame.pixels.size() / 3; ++p) {
            std::memcpy(&frame.pixels[p * 3], rgba + p * 4, 3);
        }
        frames.push_back(std::move(frame));
    }
    WebPAnimDecoderDelete(decoder);
    return frames;
#else
    (void)bytes;
    (void)name;
    no_animation();
#endif
}

}  // namespace loom::data
