#include "loom/model/qwenimage/qwenimage_transformer.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "../nn/dit_ops.h"
#include "loading/config_reader.h"
#include "loom/model/loading/weight_files.h"
#include "loom/model/nn/checkpoint.h"

namespace loom {

namespace {

// QwenEmbedRope's theta.
constexpr double kRopeTheta = 10000.0;

}  // namespace

FluxRope qwenimage_rope(int64_t text_tokens, const std::vector<std::pair<int64_t, int64_t>>& grids,
                        const std::vector<int64_t>& axes_dims, const at::Device& device) {
    const auto longs = at::TensorOptions().dtype(at::kLong).device(device);
    std::vector<at::Tensor> frames, rows, cols;
    int64_t half_side = 0;
    for (std::size_t i = 0; i < grids.size(); ++i) {
        const auto [height, width] = grids[i];
        const at::Tensor index = at::arange(height * width, longs);
        frames.push_back(at::full({height * width}, static_cast<int64_t>(i), longs));
        // scale_rope: rows -(h - h/2) .. h/2 - 1, columns likewise.
        rows.push_back(index.div(width, "floor") - (height - height / 2));
        cols.push_back(index.remainder(width) - (width - width / 2));
        half_side = std::max({half_side, height / 2, width / 2});
    }
    // The text after the grids' largest half-side, on every axis.
    const at::Tensor text = at::arange(text_tokens, longs) + half_side;
    const std::vector<at::Tensor> image_axes = {at::cat(frames), at::cat(rows), at::cat(cols)};
    std::vector<at::Tensor> cos, sin;
    for (std::size_t axis = 0; axis < axes_dims.size(); ++axis) {
        const at::Tensor positions = at::cat({text, image_axes[axis]});
        auto [c, s] = dit::rotary_tables(positions, axes_dims[axis], kRopeTheta,
                                         dit::AnglePrecision::kFloat32Throughout);
        cos.push_back(c);
        sin.push_back(s);
    }
    return {at::cat(cos, 1), at::cat(sin, 1)};
}

QwenImageTransformer2DModelImpl::QwenImageTransformer2DModelImpl(const QwenImageConfig& c)
    : config_(c) {
    const FluxConfig& f = c.blocks;
    const int64_t dim = f.inner_dim();
    auto time_text_embed =
        register_module("time_text_embed", std::make_shared<torch::nn::Module>());
    timestep_embedder =
        time_text_embed->register_module("timestep_embedder", TimestepEmbedding(256, dim));
    txt_norm_ = register_module("txt_norm", std::make_shared<torch::nn::Module>())
                    ->register_parameter("weight", at::ones({f.joint_attention_dim}));
    img_in = register_module("img_in", Linear(f.in_channels, dim));
    txt_in = register_module("txt_in", Linear(f.joint_attention_dim, dim));
    transformer_blocks = register_module("transformer_blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < f.num_layers; ++i) {
        transformer_blocks->push_back(FluxTransformerBlock(f, DoubleBlockLayout::kQwenImage));
    }
    auto norm_out = register_module("norm_out", std::make_shared<torch::nn::Module>());
    norm_out_linear = norm_out->register_module("linear", Linear(dim, 2 * dim));
    proj_out = register_module("proj_out", Linear(dim, f.out_channels));
}

at::Tensor QwenImageTransformer2DModelImpl::forward(const QwenImageInputs& in) {
    const FluxConfig& f = config_.blocks;
    std::vector<std::pair<int64_t, int64_t>> grids = {{in.height, in.width}};
    grids.insert(grids.end(), in.control_grids.begin(), in.control_grids.end());
    int64_t tokens = 0;
    for (const auto& [h, w] : grids) tokens += h * w;
    TORCH_CHECK(tokens == in.hidden_states.size(1),
                "Qwen-Image transformer: the grids' token counts must sum to the packed tokens");
    at::Tensor hidden = img_in(in.hidden_states);
    const auto dtype = hidden.scalar_type();
    // RMSNorm(joint_attention_dim, eps 1e-6), then the projection.
    at::Tensor context = txt_in(at::rms_norm(in.encoder_hidden_states,
                                             {in.encoder_hidden_states.size(-1)}, txt_norm_, 1e-6));
    // Timesteps(256, flip_sin_to_cos, shift 0, scale 1000) -> TimestepEmbedding.
    const at::Tensor temb = timestep_embedder(
        timestep_embedding(in.timestep.to(dtype), 256, true, 0.0, 1000.0).to(dtype));
    const int64_t text_tokens = context.size(1);
    const FluxRope rope = qwenimage_rope(text_tokens, grids, f.axes_dims_rope, hidden.device());
    at::Tensor bias;
    if (in.encoder_hidden_states_mask.defined()) {
        const at::Tensor keep =
            at::cat({in.encoder_hidden_states_mask.to(at::kBool),
                     at::ones({hidden.size(0), hidden.size(1)}, hidden.options().dtype(at::kBool))},
                    1);
        bias = dit::key_padding_bias(keep);
    }
    for (const auto& module : *transformer_blocks) {
        auto* block = module->as<FluxTransformerBlockImpl>();
        auto run = [block, bias](const std::vector<at::Tensor>& x) {
            auto [c, h] = block->forward(x[0], x[1], x[2], FluxRope{x[3], x[4]}, bias);
            return std::vector<at::Tensor>{h, c};
        };
        const std::vector<at::Tensor> inputs = {hidden, context, temb, rope.cos, rope.sin};
        const auto out =
            checkpointing_ && at::GradMode::is_enabled() ? checkpoint(run, inputs) : run(inputs);
        hidden = out[0];
        context = out[1];
    }
    // AdaLayerNormContinuous (no affine, eps 1e-6): scale first, then shift.
    const auto mod = norm_out_linear(at::silu(temb)).chunk(2, 1);
    const at::Tensor normed = at::layer_norm(hidden, {hidden.size(-1)}, {}, {}, 1e-6);
    return proj_out(normed * (1 + mod[0].unsqueeze(1)) + mod[1].unsqueeze(1));
}

QwenImageConfig read_qwenimage_config(const std::filesystem::path& path) {
    const ConfigReader r(path);
    QwenImageConfig c;
    FluxConfig& f = c.blocks;
    c.patch_size = r.integer("patch_size", 2);
    if (c.patch_size != 2) r.fail("patch_size", "must be 2 (Flux's 2x2 packing)");
    f.in_channels = r.integer("in_channels", 64);
    const int64_t out = r.integer("out_channels", 16);
    f.out_channels = c.patch_size * c.patch_size * out;
    f.num_layers = r.integer("num_layers", 60);
    f.num_single_layers = 0;
    f.attention_head_dim = r.integer("attention_head_dim", 128);
    f.num_attention_heads = r.integer("num_attention_heads", 24);
    f.joint_attention_dim = r.integer("joint_attention_dim", 3584);
    f.guidance_embeds = false;
    r.require_default("guidance_embeds", false);
    r.require_default("zero_cond_t", false);
    r.require_default("use_additional_t_cond", false);
    r.require_default("use_layer3d_rope", false);
    const auto ints = [](const nlohmann::json& e) { return e.is_number_integer(); };
    f.axes_dims_rope =
        r.list<int64_t>("axes_dims_rope", {16, 56, 56}, "a list of 3 integers", ints);
    int64_t rope = 0;
    for (int64_t d : f.axes_dims_rope) rope += d;
    if (f.axes_dims_rope.size() != 3 || rope != f.attention_head_dim) {
        r.fail("axes_dims_rope", "must be 3 even sizes summing to attention_head_dim (" +
                                     std::to_string(f.attention_head_dim) + ")");
    }
    return c;
}

QwenImageTransformer2DModel load_qwenimage_transformer(const std::filesystem::path& dir,
                                                       at::ScalarType dtype) {
    return load_component(QwenImageTransformer2DModel(read_qwenimage_config(dir / "config.json")),
                          dir, dtype, "transformer");
}

}  // namespace loom
