#include "loom/model/text/qwen2_vl_image_processor.h"

#include <ATen/ATen.h>

#include <cmath>

#include "loading/config_reader.h"
#include "loom/core/error.h"
#include "loom/core/py_round.h"
#include "loom/model/nn/pil_resize.h"

namespace loom {

namespace {

// PILImageResampling.BICUBIC.
constexpr int64_t kPilBicubic = 3;

}  // namespace

std::pair<int64_t, int64_t> qwen2_vl_smart_resize(int64_t height, int64_t width, int64_t factor,
                                                  int64_t min_pixels, int64_t max_pixels) {
    const double h = static_cast<double>(height), w = static_cast<double>(width);
    if (std::max(h, w) / std::min(h, w) > 200) {
        throw Error("an image of " + std::to_string(width) + "x" + std::to_string(height) +
                    " has an aspect ratio above 200, which Qwen2-VL's processor refuses");
    }
    const double f = static_cast<double>(factor);
    int64_t h_bar = py_round(h / f) * factor;
    int64_t w_bar = py_round(w / f) * factor;
    if (h_bar * w_bar > max_pixels) {
        const double beta = std::sqrt(h * w / static_cast<double>(max_pixels));
        h_bar = std::max(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
        w_bar = std::max(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
    } else if (h_bar * w_bar < min_pixels) {
        const double beta = std::sqrt(static_cast<double>(min_pixels) / (h * w));
        h_bar = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
        w_bar = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
    }
    return {h_bar, w_bar};
}

VisionPatches qwen2_vl_patches(const Qwen2VLImageProcessorConfig& c, const at::Tensor& image) {
    at::Tensor pixels = image;
    if (c.do_resize) {
        const auto [h, w] = qwen2_vl_smart_resize(
            image.size(0), image.size(1), c.patch_size * c.merge_size, c.min_pixels, c.max_pixels);
        pixels = pil_resize(image, w, h, PilFilter::kBicubic);
    }
    const int64_t height = pixels.size(0), width = pixels.size(1);
    const int64_t unit = c.patch_size * c.merge_size;
    if (height % unit != 0 || width % unit != 0) {
        throw Error("an image of " + std::to_string(width) + "x" + std::to_string(height) +
                    " is not made of whole " + std::to_string(unit) +
                    "-pixel merge groups "
                    "(the processor's do_resize is off)");
    }
    // rescale in float64 then float32, normalize in float32: [3, H, W].
    at::Tensor x = (pixels.permute({2, 0, 1}).to(at::kDouble) * c.rescale_factor).to(at::kFloat);
    const at::Tensor mean =
        at::tensor(std::vector<double>(c.image_mean.begin(), c.image_mean.end()))
            .to(at::kFloat)
            .view({3, 1, 1});
    const at::Tensor std = at::tensor(std::vector<double>(c.image_std.begin(), c.image_std.end()))
                               .to(at::kFloat)
                               .view({3, 1, 1});
    x = (x - mean) / std;
    VisionPatches out;
    out.grid_h = height / c.patch_size;
    out.grid_w = width / c.patch_size;
    const int64_t m = c.merge_size, p = c.patch_size;
    // [C, gh/m, m, p, gw/m, m, p] -> [gh/m, gw/m, m, m, C, p, p], the frame repeated.
    at::Tensor patches = x.reshape({3, out.grid_h / m, m, p, out.grid_w / m, m, p})
                             .permute({1, 4, 2, 5, 0, 3, 6})
                             .unsqueeze(5)
                             .expand({-1, -1, -1, -1, -1, c.temporal_patch_size, -1, -1});
    out.pixel_values =
        patches.reshape({out.grid_h * out.grid_w, 3 * c.temporal_patch_size * p * p}).contiguous();
    return out;
}

Qwen2VLImageProcessorConfig read_qwen2_vl_image_processor(const std::filesystem::path& folder) {
    const std::filesystem::path pre = folder / "preprocessor_config.json";
    const std::filesystem::path combined = folder / "processor_config.json";
    const bool nested = !std::filesystem::exists(pre) && std::filesystem::exists(combined);
    const ConfigReader file(nested ? combined : pre);
    const ConfigReader r = nested ? file.section("image_processor") : file;
    Qwen2VLImageProcessorConfig c;
    const ConfigReader size = r.section("size");
    c.min_pixels = r.integer("min_pixels", size.integer("shortest_edge", c.min_pixels));
    c.max_pixels = r.integer("max_pixels", size.integer("longest_edge", c.max_pixels));
    c.patch_size = r.integer("patch_size", c.patch_size);
    c.temporal_patch_size = r.integer("temporal_patch_size", c.temporal_patch_size);
    c.merge_size = r.integer("merge_size", c.merge_size);
    c.rescale_factor = r.number("rescale_factor", c.rescale_factor);
    c.do_resize = r.boolean("do_resize", true);
    r.require_default("do_rescale", true);
    r.require_default("do_normalize", true);
    if (r.integer("resample", kPilBicubic) != kPilBicubic)
        r.fail("resample", "must be 3 (bicubic): loom resizes as Qwen2-VL's processor does");
    const auto three = [&](const char* key, std::array<double, 3> fallback) {
        if (!r.has(key)) return fallback;
        const auto v = r.list<double>(key, {}, "a list of 3 numbers",
                                      [](const nlohmann::json& e) { return e.is_number(); });
        if (v.size() != 3) r.fail(key, "must be a list of 3 numbers");
        return std::array<double, 3>{v[0], v[1], v[2]};
    };
    c.image_mean = three("image_mean", c.image_mean);
    c.image_std = three("image_std", c.image_std);
    if (c.patch_size <= 0 || c.merge_size <= 0 || c.temporal_patch_size <= 0)
        r.fail("patch_size", "patch_size, merge_size and temporal_patch_size must be positive");
    return c;
}

}  // namespace loom
