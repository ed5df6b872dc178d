// Image decoding and encoding: stb_image / stb_image_write / stb_image_resize (Debian libstb-dev,
// compiled into this file as static functions, so nothing clashes with other users of stb) and
// libwebp when the build found it. Structure checks before decoding turn "the file ends early"
// into a clear "truncated" message: stb_image fills a cut-off JPEG with grey without complaint.

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>

#include "loom/core/error.h"
#include "loom/data/image.h"
#include "loom/io/atomic_file.h"

#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#include <stb/stb_image.h>

#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>

#define STB_IMAGE_RESIZE_STATIC
#define STB_IMAGE_RESIZE_IMPLEMENTATION
#include <stb/stb_image_resize.h>

#ifndef LOOM_HAVE_WEBP
#define LOOM_HAVE_WEBP 0
#endif
#if LOOM_HAVE_WEBP
#include <webp/decode.h>
#include <webp/encode.h>
#endif

namespace loom::data {

namespace {

constexpr const char* kRedo = "re-export the image or remove it from the dataset";

std::uint32_t be32(const std::uint8_t* p) {
    return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) |
           p[3];
}
std::uint32_t le32(const std::uint8_t* p) {
    return (std::uint32_t(p[3]) << 24) | (std::uint32_t(p[2]) << 16) | (std::uint32_t(p[1]) << 8) |
           p[0];
}

const std::uint8_t* bytes_of(std::string_view s) {
    return reinterpret_cast<const std::uint8_t*>(s.data());
}

// "" when the chunk structure is complete, else why not. stb_image does not check CRCs; neither
// does this (a flipped bit inside compressed data is caught by zlib instead).
std::string check_png_structure(std::string_view bytes) {
    const std::uint8_t* p = bytes_of(bytes);
    std::size_t pos = 8;
    while (true) {
        if (pos + 8 > bytes.size())
            return "the PNG image is truncated (it ends before its IEND chunk)";
        const std::uint64_t length = be32(p + pos);
        if (length > 0x7FFFFFFFu) return "the PNG image is corrupt (a chunk length is invalid)";
        const bool iend = std::memcmp(p + pos + 4, "IEND", 4) == 0;
        if (pos + 12 + length > bytes.size())
            return "the PNG image is truncated (it ends inside a chunk)";
        pos += 12 + length;
        if (iend) return "";
    }
}

// Walks the JPEG marker segments up to the first scan, then requires the end-of-image marker
// after it. Inside entropy-coded data 0xFF is always followed by 0x00 or a restart marker, so
// FF D9 there is the real end. Calls `on_segment(marker, payload)` for each header segment.
template <class F>
std::string walk_jpeg(std::string_view bytes, F&& on_segment) {
    const std::uint8_t* p = bytes_of(bytes);
    const std::size_t n = bytes.size();
    std::size_t pos = 2;
    while (true) {
        if (pos >= n) return "the JPEG image is truncated (it ends before its image data)";
        if (p[pos] != 0xFF) return "the JPEG image is corrupt (a marker is missing)";
        while (pos < n && p[pos] == 0xFF) ++pos;  // fill bytes
        if (pos >= n) return "the JPEG image is truncated (it ends before its image data)";
        const std::uint8_t marker = p[pos++];
        if (marker == 0xD8 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) continue;
        if (marker == 0xD9) return "the JPEG image is corrupt (it ends before its image data)";
        if (pos + 2 > n) return "the JPEG image is truncated (it ends inside a header)";
        const std::size_t length = (std::size_t(p[pos]) << 8) | p[pos + 1];
        if (length < 2) return "the JPEG image is corrupt (a segment length is invalid)";
        if (pos + length > n) return "the JPEG image is truncated (it ends inside a header)";
        on_segment(marker, std::string_view(bytes.data() + pos + 2, length - 2));
        pos += length;
        if (marker == 0xDA) {
            for (std::size_t i = pos; i + 1 < n; ++i) {
                if (p[i] == 0xFF && p[i + 1] == 0xD9) return "";
            }
            return "the JPEG image is truncated (its end-of-image marker is missing)";
        }
    }
}

std::string check_webp_structure(std::string_view bytes) {
    if (bytes.size() < 12) return "the WebP image is truncated (it ends inside its header)";
    const std::uint64_t riff = le32(bytes_of(bytes) + 4);
    if (riff + 8 > bytes.size()) return "the WebP image is truncated (it ends inside its data)";
    return "";
}

// EXIF orientation from an APP1 "Exif\0\0" payload (TIFF header + IFD0), or 1.
int exif_orientation(std::string_view app1) {
    if (app1.size() < 14 || app1.substr(0, 6) != std::string_view("Exif\0\0", 6)) return 1;
    const std::uint8_t* t = bytes_of(app1) + 6;
    const std::size_t n = app1.size() - 6;
    const bool little = t[0] == 'I' && t[1] == 'I';
    if (!little && !(t[0] == 'M' && t[1] == 'M')) return 1;
    auto u16 = [&](std::size_t at) -> std::uint32_t {
        return little ? (t[at] | (std::uint32_t(t[at + 1]) << 8))
                      : ((std::uint32_t(t[at]) << 8) | t[at + 1]);
    };
    auto u32 = [&](std::size_t at) -> std::uint32_t {
        return little ? le32(t + at) : be32(t + at);
    };
    if (u16(2) != 42) return 1;
    const std::size_t ifd = u32(4);
    if (ifd + 2 > n) return 1;
    const std::size_t count = u16(ifd);
    for (std::size_t i = 0; i < count; ++i) {
        const std::size_t e = ifd + 2 + i * 12;
        if (e + 12 > n) return 1;
        if (u16(e) == 0x0112 && u16(e + 2) == 3) {  // Orientation, SHORT
            const int v = int(u16(e + 8));
            return v >= 1 && v <= 8 ? v : 1;
        }
    }
    return 1;
}

struct Decoded {
    Image image;
    std::string error;  // "" on success
};

Decoded decode_stb(std::string_view bytes, const char* format) {
    if (bytes.size() > std::size_t(INT_MAX))
        return {{}, std::string("the ") + format + " file is larger than 2 GiB; " + kRedo};
    int w = 0, h = 0, channels = 0;
    stbi_uc* data = stbi_load_from_memory(bytes_of(bytes), int(bytes.size()), &w, &h, &channels, 3);
    if (data == nullptr) {
        const char* why = stbi_failure_reason();
        return {{},
                std::string("the ") + format + " image is corrupt (stb_image: " +
                    (why ? why : "unknown error") + "); " + kRedo};
    }
    std::unique_ptr<stbi_uc, void (*)(void*)> owner(data, stbi_image_free);
    Image out(w, h);
    std::memcpy(out.pixels.data(), data, out.pixels.size());
    return {std::move(out), ""};
}

Decoded decode_webp(std::string_view bytes) {
#if LOOM_HAVE_WEBP
    int w = 0, h = 0;
    if (!WebPGetInfo(bytes_of(bytes), bytes.size(), &w, &h) || w <= 0 || h <= 0)
        return {{}, std::string("the WebP image is corrupt (its header is invalid); ") + kRedo};
    Image out(w, h);
    if (!WebPDecodeRGBInto(bytes_of(bytes), bytes.size(), out.pixels.data(), out.pixels.size(),
                           w * 3))
        return {{}, std::string("the WebP image is corrupt (libwebp cannot decode it); ") + kRedo};
    return {std::move(out), ""};
#else
    (void)bytes;
    return {{},
            "it is a WebP image and this loom was built without libwebp; convert it to PNG or "
            "JPEG, or install libwebp-dev and rebuild loom"};
#endif
}

Decoded decode(std::string_view bytes) {
    if (bytes.empty()) return {{}, "the file is empty (0 bytes); " + std::string(kRedo)};
    const ImageFormat format = sniff_image_format(bytes);
    switch (format) {
        case ImageFormat::kPng: {
            std::string why = check_png_structure(bytes);
            if (!why.empty()) return {{}, why + "; " + kRedo};
            return decode_stb(bytes, "PNG");
        }
        case ImageFormat::kJpeg: {
            int orientation = 1;
            std::string why = walk_jpeg(bytes, [&](std::uint8_t marker, std::string_view payload) {
                if (marker == 0xE1 && orientation == 1) orientation = exif_orientation(payload);
            });
            if (!why.empty()) return {{}, why + "; " + kRedo};
            Decoded d = decode_stb(bytes, "JPEG");
            if (d.error.empty() && orientation != 1)
                d.image = apply_exif_orientation(d.image, orientation);
            return d;
        }
        case ImageFormat::kWebp: {
            std::string why = check_webp_structure(bytes);
            if (!why.empty()) return {{}, why + "; " + kRedo};
            return decode_webp(bytes);
        }
        case ImageFormat::kGif:
        case ImageFormat::kBmp:
        case ImageFormat::kTiff:
            return {{},
                    std::string("it is a ") + image_format_name(format) +
                        " image, which loom does not read; convert it to PNG, JPEG or WebP"};
        case ImageFormat::kUnknown: break;
    }
    return {{},
            "it is not a PNG, JPEG or WebP image (unrecognised content); convert it to one of "
            "those or remove it from the dataset"};
}

void append_to_string(void* context, void* data, int size) {
    static_cast<std::string*>(context)->append(static_cast<const char*>(data), std::size_t(size));
}

void check_encodable(const Image& image) {
    if (image.empty() || image.pixels.size() != std::size_t(image.width) * image.height * 3)
        throw Error("cannot encode an image of " + std::to_string(image.width) + "x" +
                    std::to_string(image.height) + " with " + std::to_string(image.pixels.size()) +
                    " bytes of pixels");
}

}  // namespace

Image::Image(int w, int h) : width(w), height(h), pixels(std::size_t(w) * h * 3, 0) {}

ImageFormat sniff_image_format(std::string_view b) {
    auto starts = [&](std::string_view magic) { return b.substr(0, magic.size()) == magic; };
    if (starts("\x89PNG\r\n\x1a\n")) return ImageFormat::kPng;
    if (starts("\xFF\xD8\xFF")) return ImageFormat::kJpeg;
    if (b.size() >= 12 && starts("RIFF") && b.substr(8, 4) == "WEBP") return ImageFormat::kWebp;
    if (starts("GIF87a") || starts("GIF89a")) return ImageFormat::kGif;
    if (starts("BM")) return ImageFormat::kBmp;
    if (starts(std::string_view("II*\0", 4)) || starts(std::string_view("MM\0*", 4)))
        return ImageFormat::kTiff;
    return ImageFormat::kUnknown;
}

const char* image_format_name(ImageFormat format) {
    switch (format) {
        case ImageFormat::kPng: return "PNG";
        case ImageFormat::kJpeg: return "JPEG";
        case ImageFormat::kWebp: return "WebP";
        case ImageFormat::kGif: return "GIF";
        case ImageFormat::kBmp: return "BMP";
        case ImageFormat::kTiff: return "TIFF";
        case ImageFormat::kUnknown: break;
    }
    return "unknown";
}

bool webp_supported() {
    return LOOM_HAVE_WEBP != 0;
}

Image decode_image(std::string_view bytes, const std::string& name) {
    Decoded d = decode(bytes);
    if (!d.error.empty()) throw FormatError(name, d.error);
    return std::move(d.image);
}

namespace {

// An image file's bytes; IoError naming it when it cannot be read.
std::string image_file_bytes(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw IoError(path.string(), "cannot open the image: " + std::string(std::strerror(errno)));
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw IoError(path.string(), "cannot read the image");
    return bytes;
}

// The RGBA pixels' alpha, copied into R, G and B.
Image alpha_image(const std::uint8_t* rgba, int w, int h) {
    Image out(w, h);
    for (std::size_t p = 0; p < std::size_t(w) * h; ++p) {
        std::memset(&out.pixels[p * 3], rgba[p * 4 + 3], 3);
    }
    return out;
}

}  // namespace

Image decode_alpha(std::string_view bytes, const std::string& name) {
    // Validates the file as decode_image does (and names what is wrong), then reads its alpha.
    decode_image(bytes, name);
    const char* kNoAlpha =
        "has no alpha channel; an inpaint image is a PNG or WebP whose alpha is 0 where the "
        "model inpaints and 255 where it keeps the image";
    const ImageFormat format = sniff_image_format(bytes);
    if (format == ImageFormat::kPng) {
        int w = 0, h = 0, channels = 0;
        stbi_uc* data =
            stbi_load_from_memory(bytes_of(bytes), int(bytes.size()), &w, &h, &channels, 4);
        if (data == nullptr) throw FormatError(name, "the PNG image is corrupt");
        std::unique_ptr<stbi_uc, void (*)(void*)> owner(data, stbi_image_free);
        if (channels != 2 && channels != 4) throw FormatError(name, kNoAlpha);
        return alpha_image(data, w, h);
    }
#if LOOM_HAVE_WEBP
    if (format == ImageFormat::kWebp) {
        WebPBitstreamFeatures features;
        if (WebPGetFeatures(bytes_of(bytes), bytes.size(), &features) != VP8_STATUS_OK)
            throw FormatError(name, "the WebP image is corrupt (its header is invalid)");
        if (!features.has_alpha) throw FormatError(name, kNoAlpha);
        const int w = features.width, h = features.height;
        std::vector<std::uint8_t> rgba(std::size_t(w) * h * 4);
        if (!WebPDecodeRGBAInto(bytes_of(bytes), bytes.size(), rgba.data(), rgba.size(), w * 4))
            throw FormatError(name, "the WebP image is corrupt (libwebp cannot decode it)");
        return alpha_image(rgba.data(), w, h);
    }
#endif
    throw FormatError(name, kNoAlpha);
}

Image read_alpha(const std::filesystem::path& path) {
    return decode_alpha(image_file_bytes(path), path.string());
}

Image read_image(const std::filesystem::path& path) {
    return decode_image(image_file_bytes(path), path.string());
}

int jpeg_exif_orientation(std::string_view jpeg_bytes) {
    if (sniff_image_format(jpeg_bytes) != ImageFormat::kJpeg) return 1;
    int orientation = 1;
    walk_jpeg(jpeg_bytes, [&](std::uint8_t marker, std::string_view payload) {
        if (marker == 0xE1 && orientation == 1) orientation = exif_orientation(payload);
    });
    return orientation;
}

std::string encode_png(const Image& image) {
    check_encodable(image);
    std::string out;
    if (!stbi_write_png_to_func(append_to_string, &out, image.width, image.height, 3,
                                image.pixels.data(), image.width * 3))
        throw Error("PNG encoding failed");
    return out;
}

std::string encode_png_with_alpha(const Image& image, const std::vector<std::uint8_t>& alpha) {
    check_encodable(image);
    const std::size_t n = std::size_t(image.width) * image.height;
    if (alpha.size() != n)
        throw Error("cannot encode an alpha of " + std::to_string(alpha.size()) + " bytes for " +
                    std::to_string(n) + " pixels");
    std::vector<std::uint8_t> rgba(n * 4);
    for (std::size_t p = 0; p < n; ++p) {
        std::memcpy(&rgba[p * 4], &image.pixels[p * 3], 3);
        rgba[p * 4 + 3] = alpha[p];
    }
    std::string out;
    if (!stbi_write_png_to_func(append_to_string, &out, image.width, image.height, 4, rgba.data(),
                                image.width * 4))
        throw Error("PNG encoding failed");
    return out;
}

std::string encode_jpeg(const Image& image, int quality) {
    check_encodable(image);
    std::string out;
    if (!stbi_write_jpg_to_func(append_to_string, &out, image.width, image.height, 3,
                                image.pixels.data(), std::clamp(quality, 1, 100)))
        throw Error("JPEG encoding failed");
    return out;
}

std::string encode_webp(const Image& image) {
    check_encodable(image);
#if LOOM_HAVE_WEBP
    std::uint8_t* data = nullptr;
    const std::size_t size = WebPEncodeLosslessRGB(image.pixels.data(), image.width, image.height,
                                                   image.width * 3, &data);
    if (size == 0 || data == nullptr) throw Error("WebP encoding failed");
    std::string out(reinterpret_cast<const char*>(data), size);
    WebPFree(data);
    return out;
#else
    throw Error("this loom was built without libwebp; install libwebp-dev and rebuild loom");
#endif
}

void write_png(const std::filesystem::path& path, const Image& image) {
    write_file_atomic(path, encode_png(image));
}

Image resize_image(const Image& image, int width, int height) {
    if (width <= 0 || height <= 0 || image.empty())
        throw Error("cannot resize a " + std::to_string(image.width) + "x" +
                    std::to_string(image.height) + " image to " + std::to_string(width) + "x" +
                    std::to_string(height));
    if (width == image.width && height == image.height) return image;
    Image out(width, height);
    if (!stbir_resize_uint8(image.pixels.data(), image.width, image.height, 0, out.pixels.data(),
                            width, height, 0, 3))
        throw Error("image resize failed (out of memory?)");
    return out;
}

}  // namespace loom::data
