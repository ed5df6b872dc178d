// Pixel operations that need no codec: crop, flips, EXIF orientation, bucket fitting, grids.

#include <algorithm>
#include <cmath>
#include <cstring>

#include "loom/core/error.h"
#include "loom/data/image.h"

namespace loom::data {

namespace {

std::string size_text(int w, int h) {
    return std::to_string(w) + "x" + std::to_string(h);
}

}  // namespace

Image crop_image(const Image& image, int x, int y, int w, int h) {
    if (x < 0 || y < 0 || w <= 0 || h <= 0 || x + w > image.width || y + h > image.height)
        throw Error("crop " + size_text(w, h) + " at (" + std::to_string(x) + ", " +
                    std::to_string(y) + ") is outside the " + size_text(image.width, image.height) +
                    " image");
    Image out(w, h);
    for (int row = 0; row < h; ++row)
        std::memcpy(out.at(0, row), image.at(x, y + row), std::size_t(w) * 3);
    return out;
}

Image flip_image(const Image& image, bool flip_x, bool flip_y) {
    if (!flip_x && !flip_y) return image;
    Image out(image.width, image.height);
    for (int y = 0; y < image.height; ++y) {
        const int sy = flip_y ? image.height - 1 - y : y;
        for (int x = 0; x < image.width; ++x) {
            const int sx = flip_x ? image.width - 1 - x : x;
            std::memcpy(out.at(x, y), image.at(sx, sy), 3);
        }
    }
    return out;
}

Image apply_exif_orientation(const Image& image, int orientation) {
    // Orientations as PIL's exif_transpose applies them: 2 mirror, 3 rotate 180, 4 flip,
    // 5 transpose, 6 rotate 90° clockwise, 7 transverse, 8 rotate 90° counter-clockwise.
    switch (orientation) {
        case 2: return flip_image(image, true, false);
        case 3: return flip_image(image, true, true);
        case 4: return flip_image(image, false, true);
        case 5:
        case 6:
        case 7:
        case 8: break;
        default: return image;
    }
    const int w = image.width, h = image.height;
    Image out(h, w);  // sides swap
    for (int oy = 0; oy < w; ++oy) {
        for (int ox = 0; ox < h; ++ox) {
            int ix = 0, iy = 0;
            switch (orientation) {
                case 5: ix = oy, iy = ox; break;
                case 6: ix = oy, iy = h - 1 - ox; break;
                case 7: ix = w - 1 - oy, iy = h - 1 - ox; break;
                default: ix = w - 1 - oy, iy = ox; break;  // 8
            }
            std::memcpy(out.at(ox, oy), image.at(ix, iy), 3);
        }
    }
    return out;
}

Image fit_to_bucket(const Image& image, const CropPlan& plan) {
    const Image scaled = resize_image(image, plan.scale_width, plan.scale_height);
    return crop_image(scaled, plan.crop_x, plan.crop_y, plan.bucket.width, plan.bucket.height);
}

Image image_grid(const std::vector<Image>& images, int columns, int padding) {
    if (images.empty()) return {};
    const int n = int(images.size());
    if (columns <= 0) columns = int(std::ceil(std::sqrt(double(n))));
    columns = std::min(columns, n);
    const int rows = (n + columns - 1) / columns;
    padding = std::max(padding, 0);
    int cell_w = 0, cell_h = 0;
    for (const Image& im : images) {
        cell_w = std::max(cell_w, im.width);
        cell_h = std::max(cell_h, im.height);
    }
    Image out(columns * cell_w + (columns - 1) * padding, rows * cell_h + (rows - 1) * padding);
    for (int i = 0; i < n; ++i) {
        const Image& im = images[std::size_t(i)];
        const int x0 = (i % columns) * (cell_w + padding);
        const int y0 = (i / columns) * (cell_h + padding);
        for (int y = 0; y < im.height; ++y)
            std::memcpy(out.at(x0, y0 + y), im.at(0, y), std::size_t(im.width) * 3);
    }
    return out;
}

}  // namespace loom::data
