#include "loom/model/nn/pil_resize.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "loom/core/error.h"

namespace loom {

namespace {

// Resample.c's PRECISION_BITS for 8-bit images: 32 - 8 - 2.
constexpr int kPrecisionBits = 32 - 8 - 2;
constexpr double kPi = 3.14159265358979323846;

double bilinear_filter(double x) {
    x = std::fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

// Keys' cubic with a = -0.5, as Pillow's BICUBIC.
double bicubic_filter(double x) {
    constexpr double a = -0.5;
    x = std::fabs(x);
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

double sinc_filter(double x) {
    if (x == 0.0) return 1.0;
    x *= kPi;
    return std::sin(x) / x;
}

double lanczos_filter(double x) {
    // A sinc truncated to three lobes.
    if (-3.0 <= x && x < 3.0) return sinc_filter(x) * sinc_filter(x / 3);
    return 0.0;
}

struct Filter {
    double (*weight)(double);
    double support;
};

Filter filter_of(PilFilter f) {
    switch (f) {
        case PilFilter::kBilinear: return {bilinear_filter, 1.0};
        case PilFilter::kBicubic: return {bicubic_filter, 2.0};
        case PilFilter::kLanczos: return {lanczos_filter, 3.0};
    }
    return {bicubic_filter, 2.0};
}

// One axis's taps: for output pixel i, `count[i]` source pixels from `first[i]` with fixed-point
// weights kk[i * ksize + k].
struct Taps {
    int ksize = 0;
    std::vector<int> first, count;
    std::vector<std::int32_t> kk;
};

Taps precompute(int in_size, int out_size, const Filter& filter) {
    const double scale = static_cast<double>(in_size) / out_size;
    const double filterscale = std::max(scale, 1.0);
    const double support = filter.support * filterscale;
    Taps t;
    t.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
    t.first.resize(out_size);
    t.count.resize(out_size);
    t.kk.assign(static_cast<std::size_t>(out_size) * t.ksize, 0);
    std::vector<double> k(t.ksize);
    for (int xx = 0; xx < out_size; ++xx) {
        const double center = (xx + 0.5) * scale;
        const double ss = 1.0 / filterscale;
        // Resample.c rounds by adding 0.5 and truncating toward zero.
        const int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
        const int xmax = std::min(static_cast<int>(center + support + 0.5), in_size) - xmin;
        double ww = 0.0;
        for (int x = 0; x < xmax; ++x) {
            k[x] = filter.weight((x + xmin - center + 0.5) * ss);
            ww += k[x];
        }
        for (int x = 0; x < xmax; ++x) {
            double w = ww != 0.0 ? k[x] / ww : k[x];
            // normalize_coeffs_8bpc: rounded half away from zero to fixed point.
            w *= (1 << kPrecisionBits);
            t.kk[static_cast<std::size_t>(xx) * t.ksize + x] =
                static_cast<std::int32_t>(w < 0 ? -0.5 + w : 0.5 + w);
        }
        t.first[xx] = xmin;
        t.count[xx] = xmax;
    }
    return t;
}

// Row-major RGB bytes.
struct Rgb {
    int width = 0, height = 0;
    std::vector<std::uint8_t> pixels;
    Rgb(int w, int h) : width(w), height(h), pixels(static_cast<std::size_t>(w) * h * 3) {}
    std::uint8_t* at(int x, int y) { return pixels.data() + (std::size_t(y) * width + x) * 3; }
    const std::uint8_t* at(int x, int y) const {
        return pixels.data() + (std::size_t(y) * width + x) * 3;
    }
};

std::uint8_t clip8(std::int32_t in) {
    if (in >= (1 << kPrecisionBits << 8)) return 255;
    if (in <= 0) return 0;
    return static_cast<std::uint8_t>(in >> kPrecisionBits);
}

// `rows` rows of `in` from row `row0`, resampled along x to t's output width.
Rgb horizontal(const Rgb& in, int row0, int rows, const Taps& t) {
    const int out_w = static_cast<int>(t.first.size());
    Rgb out(out_w, rows);
    for (int y = 0; y < rows; ++y) {
        for (int xx = 0; xx < out_w; ++xx) {
            const std::int32_t* k = &t.kk[static_cast<std::size_t>(xx) * t.ksize];
            std::int32_t ss[3] = {1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1),
                                  1 << (kPrecisionBits - 1)};
            for (int x = 0; x < t.count[xx]; ++x) {
                const std::uint8_t* p = in.at(x + t.first[xx], y + row0);
                for (int c = 0; c < 3; ++c) ss[c] += p[c] * k[x];
            }
            std::uint8_t* o = out.at(xx, y);
            for (int c = 0; c < 3; ++c) o[c] = clip8(ss[c]);
        }
    }
    return out;
}

// `in` resampled along y, t's first rows shifted by `row0` (the rows the horizontal pass kept).
Rgb vertical(const Rgb& in, const Taps& t, int row0) {
    const int out_h = static_cast<int>(t.first.size());
    Rgb out(in.width, out_h);
    for (int yy = 0; yy < out_h; ++yy) {
        const std::int32_t* k = &t.kk[static_cast<std::size_t>(yy) * t.ksize];
        const int ymin = t.first[yy] - row0;
        for (int x = 0; x < in.width; ++x) {
            std::int32_t ss[3] = {1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1),
                                  1 << (kPrecisionBits - 1)};
            for (int y = 0; y < t.count[yy]; ++y) {
                const std::uint8_t* p = in.at(x, y + ymin);
                for (int c = 0; c < 3; ++c) ss[c] += p[c] * k[y];
            }
            std::uint8_t* o = out.at(x, yy);
            for (int c = 0; c < 3; ++c) o[c] = clip8(ss[c]);
        }
    }
    return out;
}

}  // namespace

at::Tensor pil_resize(const at::Tensor& image, int64_t width, int64_t height, PilFilter filter) {
    TORCH_CHECK(image.dim() == 3 && image.size(2) == 3 && image.scalar_type() == at::kByte &&
                    image.device().is_cpu(),
                "pil_resize: the image must be uint8 [H, W, 3] on the host");
    if (width <= 0 || height <= 0 || image.numel() == 0) {
        throw Error("pil_resize: sizes must be positive (asked " + std::to_string(width) + "x" +
                    std::to_string(height) + " of " + std::to_string(image.size(1)) + "x" +
                    std::to_string(image.size(0)) + ")");
    }
    // Image.resize returns a copy at the same size.
    if (width == image.size(1) && height == image.size(0)) return image.clone();
    Rgb in(static_cast<int>(image.size(1)), static_cast<int>(image.size(0)));
    const at::Tensor src = image.contiguous();
    std::copy_n(src.data_ptr<std::uint8_t>(), in.pixels.size(), in.pixels.begin());
    const Filter f = filter_of(filter);
    const int w = static_cast<int>(width), h = static_cast<int>(height);
    const Taps horiz = precompute(in.width, w, f);
    const Taps vert = precompute(in.height, h, f);
    Rgb out = [&] {
        if (h == in.height) return horizontal(in, 0, in.height, horiz);
        if (w == in.width) return vertical(in, vert, 0);
        // Only the source rows the vertical pass reads go through the horizontal one.
        const int first_row = vert.first.front();
        const int last_row = vert.first.back() + vert.count.back();
        return vertical(horizontal(in, first_row, last_row - first_row, horiz), vert, first_row);
    }();
    at::Tensor result = at::empty({height, width, 3}, at::kByte);
    std::copy(out.pixels.begin(), out.pixels.end(), result.data_ptr<std::uint8_t>());
    return result;
}

}  // namespace loom
