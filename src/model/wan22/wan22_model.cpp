#include "loom/model/wan22/wan22_model.h"

#include "loading/config_reader.h"
#include "loom/core/error.h"
#include "loom/core/logging.h"

namespace loom {

Wan22ExpertsImpl::Wan22ExpertsImpl(WanTransformer3DModel high_noise,
                                   WanTransformer3DModel low_noise)
    : transformer_1(register_module("transformer_1", std::move(high_noise))),
      transformer_2(register_module("transformer_2", std::move(low_noise))) {}

namespace {

// ai-toolkit's boundary_ratio for Wan 2.2 14B text-to-video (wan22_14b_model.py), used when the
// folder's model_index.json has none.
constexpr double kWan22DefaultBoundary = 0.875;

// The two experts must take and give the same tensors: the router hands either the same input.
void check_same_shapes(const WanConfig& high, const WanConfig& low,
                       const std::filesystem::path& where) {
    const bool same = high.in_channels == low.in_channels &&
                      high.out_channels == low.out_channels && high.text_dim == low.text_dim &&
                      high.patch_size == low.patch_size;
    if (!same) {
        throw FormatError(where.string(),
                          "describes a low-noise expert whose channels, text width or patch size "
                          "differ from transformer/config.json's; the two experts of a Wan 2.2 "
                          "folder take the same inputs");
    }
}

}  // namespace

Wan22Model load_wan22(const std::filesystem::path& root, const WanLoadOptions& o) {
    DiffusersFolder folder = read_diffusers_folder(root);
    const std::filesystem::path index = root / "model_index.json";
    if (!is_wan_pipeline(folder)) {
        throw FormatError(index.string(),
                          "pipeline class '" + folder.pipeline_class + "' is not WanPipeline");
    }
    const ConfigReader r(index);
    if (r.boolean("expand_timesteps", false)) {
        r.fail("expand_timesteps",
               "is true: Wan 2.2's TI2V 5B (per-token timesteps, its own VAE), which loom does "
               "not support yet (Wan 2.2 14B text-to-video only)");
    }
    if (!folder.has("transformer_2")) {
        throw FormatError(index.string(),
                          "has no 'transformer_2': a Wan 2.1 folder (one transformer), arch wan21, "
                          "not Wan 2.2 14B's two experts");
    }
    folder.require({"transformer_2"});
    Wan22Model wan;
    wan.boundary_ratio = r.number("boundary_ratio", kWan22DefaultBoundary);
    if (!r.has("boundary_ratio")) {
        // diffusers' WanPipeline without one never switches to transformer_2; loom routes as
        // ai-toolkit's Wan 2.2 14B does, and says at which timestep.
        logger("model").info(
            "{} has no boundary_ratio: the high-noise expert denoises timesteps from {:g} of "
            "1000 up and the low-noise expert those below (ai-toolkit's Wan 2.2 14B boundary, "
            "{:g})",
            index.string(), kWan22DefaultBoundary * 1000.0, kWan22DefaultBoundary);
    }
    if (!(wan.boundary_ratio > 0.0 && wan.boundary_ratio < 1.0)) {
        r.fail("boundary_ratio",
               "must lie between 0 and 1 (the share of the timesteps above "
               "which the high-noise expert denoises)");
    }
    const std::filesystem::path low_config = folder.dir("transformer_2") / "config.json";
    check_same_shapes(read_wan_config(folder.dir("transformer") / "config.json"),
                      read_wan_config(low_config), low_config);
    wan.base = load_wan_components(std::move(folder), o);
    wan.experts = Wan22Experts(wan.base.transformer,
                               load_wan_transformer(wan.base.folder, "transformer_2", o.dtype));
    wan.experts->eval();
    return wan;
}

}  // namespace loom
