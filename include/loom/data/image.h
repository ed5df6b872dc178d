#pragma once

// 8-bit RGB images: decoding training images (PNG, JPEG, WebP), writing samples (PNG), and the
// pixel operations the loader needs (area-correct resize, crop, flips, EXIF orientation, grids).
// No torch here; image_tensor.h converts to and from tensors.
//
// Decoding follows PIL's `Image.open(...).convert('RGB')` with `exif_transpose`, as ai-toolkit
// does: grey becomes RGB, alpha is dropped (not composited), 16-bit PNGs are reduced to 8 bits,
// and a JPEG's EXIF orientation is applied. The format comes from the bytes, not the file name.
// Functions are thread-safe (no shared state).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "loom/data/bucket.h"

namespace loom::data {

// Row-major RGB, 3 bytes per pixel, no padding between rows.
struct Image {
    int width = 0;
    int height = 0;
    std::vector<std::uint8_t> pixels;  // width * height * 3

    Image() = default;
    Image(int w, int h);  // black
    bool empty() const { return width == 0 || height == 0; }
    std::uint8_t* at(int x, int y) { return pixels.data() + (std::size_t(y) * width + x) * 3; }
    const std::uint8_t* at(int x, int y) const {
        return pixels.data() + (std::size_t(y) * width + x) * 3;
    }
};

enum class ImageFormat { kPng, kJpeg, kWebp, kGif, kBmp, kTiff, kUnknown };

// Recognises the format from the first bytes (magic numbers).
ImageFormat sniff_image_format(std::string_view bytes);
// "PNG", "JPEG", "WebP", "GIF", "BMP", "TIFF", "unknown".
const char* image_format_name(ImageFormat format);
// True when loom was built with libwebp (decode_image then reads WebP).
bool webp_supported();

// Decodes PNG, JPEG or WebP bytes. `name` names the source in error messages. Throws
// FormatError("<name>: ...") for truncated or corrupt data and for other formats, with what to
// do (re-export the file, or convert it to PNG/JPEG/WebP).
Image decode_image(std::string_view bytes, const std::string& name);
// Reads and decodes a file. IoError when it cannot be read, FormatError as decode_image.
Image read_image(const std::filesystem::path& path);
// The alpha channel of PNG or WebP bytes, in each of the three channels of an Image (so it is
// fitted and flipped as an image is): an inpaint image's mask, 255 where the image is kept.
// FormatError as decode_image, and for an image without an alpha channel (a JPEG, an RGB PNG).
Image decode_alpha(std::string_view bytes, const std::string& name);
Image read_alpha(const std::filesystem::path& path);

// Encoders (samples, grids, and test fixtures). Throw loom::Error when encoding fails.
std::string encode_png(const Image& image);
// An RGBA PNG: `image`'s colours with `alpha` (width x height bytes) as their alpha (an inpaint
// image, datasets[].inpaint_path).
std::string encode_png_with_alpha(const Image& image, const std::vector<std::uint8_t>& alpha);
std::string encode_jpeg(const Image& image, int quality = 95);  // quality 1..100
// Lossless WebP; throws loom::Error when loom was built without libwebp.
std::string encode_webp(const Image& image);
// Writes a PNG atomically (io/atomic_file.h); IoError names the path.
void write_png(const std::filesystem::path& path, const Image& image);

// Area-correct resampling to width x height (Mitchell filter when shrinking, Catmull-Rom when
// enlarging, edges clamped), like PIL's antialiased resize. Both sizes must be positive.
Image resize_image(const Image& image, int width, int height);
// The w x h rectangle at (x, y); throws loom::Error when it is not inside the image.
Image crop_image(const Image& image, int x, int y, int w, int h);
// Mirrors left-right (flip_x) and/or top-bottom (flip_y).
Image flip_image(const Image& image, bool flip_x, bool flip_y);
// Applies an EXIF orientation (1..8; others are treated as 1) so the result is upright.
Image apply_exif_orientation(const Image& image, int orientation);
// The EXIF orientation stored in a JPEG's APP1 segment, or 1 when there is none.
int jpeg_exif_orientation(std::string_view jpeg_bytes);

// Scales and centre-crops to the plan's bucket (bucket.h plan_crop): the result is exactly
// plan.bucket.width x plan.bucket.height.
Image fit_to_bucket(const Image& image, const CropPlan& plan);

// Lays `images` out left to right, top to bottom, in `columns` columns (0: ceil(sqrt(n))). Each
// cell is as large as the largest image; smaller images sit in their cell's top-left corner,
// and `padding` black pixels separate the cells. An empty list gives an empty image.
Image image_grid(const std::vector<Image>& images, int columns = 0, int padding = 0);

}  // namespace loom::data
