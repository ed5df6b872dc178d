#include "loom/model/text/qwen2_5_vision.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <memory>

#include "loading/config_reader.h"
#include "loom/core/error.h"
#include "loom/io/safetensors.h"
#include "loom/model/loading/weight_files.h"
#include "loom/model/text/decoder_lm.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

// An image's patches in the blocks' window order: `order` lists merge groups (of merge_size^2
// consecutive patches) window by window, offset by the images before; `windows` the windows'
// lengths in patches; `positions` each patch's (row, column) in processor order.
struct VisionLayout {
    std::vector<int64_t> order;
    std::vector<int64_t> windows;
    std::vector<int64_t> images;  // each image's (frame's) patch count: full attention's segments
    std::vector<int64_t> rows, cols;
};

VisionLayout vision_layout(const Qwen2_5_VisionConfig& c, const std::vector<VisionPatches>& in) {
    VisionLayout out;
    const int64_t m = c.spatial_merge_size;
    // get_vision_window_index's vit_merger_window_size: a window's side in merge groups.
    const int64_t side = c.window_size / m / c.patch_size;
    int64_t offset = 0;
    for (const VisionPatches& p : in) {
        const int64_t gh = p.grid_h / m, gw = p.grid_w / m;
        for (int64_t t = 0; t < p.grid_t; ++t) {
            // Windows in raster order, each's groups in raster order; empty windows have none.
            for (int64_t wy = 0; wy < gh; wy += side) {
                for (int64_t wx = 0; wx < gw; wx += side) {
                    int64_t groups = 0;
                    for (int64_t y = wy; y < std::min(wy + side, gh); ++y) {
                        for (int64_t x = wx; x < std::min(wx + side, gw); ++x) {
                            out.order.push_back(offset + (t * gh + y) * gw + x);
                            ++groups;
                        }
                    }
                    out.windows.push_back(groups * m * m);
                }
            }
            out.images.push_back(p.grid_h * p.grid_w);
            // get_vision_position_ids: rows and columns in merge-group-major order.
            for (int64_t by = 0; by < gh; ++by)
                for (int64_t bx = 0; bx < gw; ++bx)
                    for (int64_t iy = 0; iy < m; ++iy)
                        for (int64_t ix = 0; ix < m; ++ix) {
                            out.rows.push_back(by * m + iy);
                            out.cols.push_back(bx * m + ix);
                        }
        }
        offset += p.grid_t * gh * gw;
    }
    return out;
}

// Rows of `x` [N, ...] permuted by merge group: group order[i] becomes group i.
at::Tensor by_groups(const at::Tensor& x, const at::Tensor& order, int64_t unit) {
    const int64_t n = x.size(0);
    return x.reshape({n / unit, unit, -1}).index_select(0, order).reshape({n, -1});
}

}  // namespace

Qwen2_5_VisionBlockImpl::Qwen2_5_VisionBlockImpl(const Qwen2_5_VisionConfig& c)
    : heads_(c.num_heads) {
    const int64_t d = c.hidden_size;
    norm1 = register_module("norm1", T5LayerNorm(d, 1e-6));
    norm2 = register_module("norm2", T5LayerNorm(d, 1e-6));
    auto attn = register_module("attn", std::make_shared<torch::nn::Module>());
    qkv = attn->register_module("qkv", Linear(d, 3 * d));
    proj = attn->register_module("proj", Linear(d, d));
    auto mlp = register_module("mlp", std::make_shared<torch::nn::Module>());
    gate_proj = mlp->register_module("gate_proj", Linear(d, c.intermediate_size));
    up_proj = mlp->register_module("up_proj", Linear(d, c.intermediate_size));
    down_proj = mlp->register_module("down_proj", Linear(c.intermediate_size, d));
}

at::Tensor Qwen2_5_VisionBlockImpl::forward(const at::Tensor& x, const at::Tensor& cos,
                                            const at::Tensor& sin,
                                            const std::vector<int64_t>& segments) {
    const int64_t n = x.size(0);
    const auto parts = qkv(norm1(x)).view({n, 3, heads_, -1}).unbind(1);  // [N, heads, d] each
    const auto dtype = x.scalar_type();
    // apply_rotary_pos_emb_vision: in float32, the tables shared by the heads.
    const auto turn = [&](const at::Tensor& t) {
        const at::Tensor f = t.to(at::kFloat);
        return (f * cos.unsqueeze(1) + rotate_half(f) * sin.unsqueeze(1)).to(dtype);
    };
    const at::Tensor q = turn(parts[0]).transpose(0, 1);  // [heads, N, d]
    const at::Tensor k = turn(parts[1]).transpose(0, 1);
    const at::Tensor v = parts[2].transpose(0, 1);
    // Each segment (a window, or a whole image) attends within itself.
    std::vector<at::Tensor> outs;
    int64_t start = 0;
    for (int64_t len : segments) {
        outs.push_back(at::scaled_dot_product_attention(q.narrow(1, start, len).unsqueeze(0),
                                                        k.narrow(1, start, len).unsqueeze(0),
                                                        v.narrow(1, start, len).unsqueeze(0))
                           .squeeze(0));
        start += len;
    }
    const at::Tensor attended = at::cat(outs, 1).transpose(0, 1).reshape({n, -1});
    const at::Tensor h = x + proj(attended);
    const at::Tensor y = norm2(h);
    return h + down_proj(at::silu(gate_proj(y)) * up_proj(y));
}

Qwen2_5_VisionImpl::Qwen2_5_VisionImpl(const Qwen2_5_VisionConfig& c) : config_(c) {
    auto patch_embed = register_module("patch_embed", std::make_shared<torch::nn::Module>());
    auto conv = patch_embed->register_module("proj", std::make_shared<torch::nn::Module>());
    patch_weight_ =
        conv->register_parameter("weight",
                                 at::zeros({c.hidden_size, c.in_channels, c.temporal_patch_size,
                                            c.patch_size, c.patch_size}),
                                 /*requires_grad=*/false);
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.depth; ++i) blocks->push_back(Qwen2_5_VisionBlock(c));
    const int64_t merged = c.hidden_size * c.spatial_merge_size * c.spatial_merge_size;
    auto merger = register_module("merger", std::make_shared<torch::nn::Module>());
    ln_q = merger->register_module("ln_q", T5LayerNorm(c.hidden_size, 1e-6));
    auto mlp = merger->register_module("mlp", std::make_shared<torch::nn::Module>());
    merger_fc1 = mlp->register_module("0", Linear(merged, merged));
    merger_fc2 = mlp->register_module("2", Linear(merged, c.out_hidden_size));
}

at::Tensor Qwen2_5_VisionImpl::forward(const std::vector<VisionPatches>& images) {
    const Qwen2_5_VisionConfig& c = config_;
    TORCH_CHECK(!images.empty(), "the vision tower needs at least one image");
    const VisionLayout layout = vision_layout(c, images);
    const at::Device device = patch_weight_.device();
    const auto dtype = patch_weight_.scalar_type();
    std::vector<at::Tensor> pixels;
    for (const VisionPatches& p : images) pixels.push_back(p.pixel_values);
    // The Conv3d whose stride is its kernel: one matrix product per patch.
    at::Tensor x = at::matmul(at::cat(pixels).to(device, dtype),
                              patch_weight_.reshape({c.hidden_size, -1}).t());
    const int64_t unit = c.spatial_merge_size * c.spatial_merge_size;
    const at::Tensor order = at::tensor(layout.order, at::kLong).to(device);
    x = by_groups(x, order, unit);
    // The 2D rotary tables: head_dim/4 frequencies for rows, as many for columns, both halves.
    const int64_t head_dim = c.hidden_size / c.num_heads;
    const int64_t spatial = head_dim / 2;
    const auto floats = at::TensorOptions().dtype(at::kFloat).device(device);
    const at::Tensor inv_freq = 1.0 / at::pow(c.rope_theta, at::arange(0, spatial, 2, floats) /
                                                                static_cast<double>(spatial));
    const at::Tensor rows = at::tensor(layout.rows, at::kLong).to(device).to(at::kFloat);
    const at::Tensor cols = at::tensor(layout.cols, at::kLong).to(device).to(at::kFloat);
    const at::Tensor half =
        at::cat({rows.unsqueeze(1) * inv_freq, cols.unsqueeze(1) * inv_freq}, 1);
    const at::Tensor angles = by_groups(at::cat({half, half}, 1), order, unit);
    const at::Tensor cos = angles.cos(), sin = angles.sin();
    for (std::size_t i = 0; i < blocks->size(); ++i) {
        const bool full = std::find(c.fullatt_block_indexes.begin(), c.fullatt_block_indexes.end(),
                                    static_cast<int64_t>(i)) != c.fullatt_block_indexes.end();
        // Full attention over each image's patches: in window order they are still contiguous.
        x = blocks[i]->as<Qwen2_5_VisionBlockImpl>()->forward(
            x, cos, sin, full ? layout.images : layout.windows);
    }
    const int64_t hidden = c.hidden_size * unit;
    at::Tensor merged = merger_fc2(at::gelu(merger_fc1(ln_q(x).reshape({-1, hidden}))));
    // Back to the image's order.
    return merged.index_select(0, at::argsort(order));
}

Qwen2_5_VisionConfig read_qwen2_5_vision_config(const fs::path& config_json) {
    const ConfigReader top(config_json);
    const ConfigReader r = top.section("vision_config");
    Qwen2_5_VisionConfig c;
    c.depth = r.integer("depth", c.depth);
    c.hidden_size = r.integer("hidden_size", c.hidden_size);
    c.intermediate_size = r.integer("intermediate_size", c.intermediate_size);
    c.num_heads = r.integer("num_heads", c.num_heads);
    c.out_hidden_size = r.integer("out_hidden_size", c.out_hidden_size);
    // transformers 4 wrote in_chans.
    c.in_channels = r.integer("in_channels", r.integer("in_chans", c.in_channels));
    c.patch_size = r.integer("patch_size", c.patch_size);
    c.temporal_patch_size = r.integer("temporal_patch_size", c.temporal_patch_size);
    c.spatial_merge_size = r.integer("spatial_merge_size", c.spatial_merge_size);
    c.window_size = r.integer("window_size", c.window_size);
    c.fullatt_block_indexes =
        r.list<int64_t>("fullatt_block_indexes", c.fullatt_block_indexes, "a list of integers",
                        [](const nlohmann::json& e) { return e.is_number_integer(); });
    const ConfigReader rope = r.section("rope_parameters");
    c.rope_theta = rope.number("rope_theta", c.rope_theta);
    const std::string rope_type = rope.text("rope_type", "axial");
    if (rope_type != "axial") rope.fail("rope_type", "is '" + rope_type + "'; loom builds 'axial'");
    const std::string act = r.text("hidden_act", "silu");
    if (act != "silu") r.fail("hidden_act", "is '" + act + "'; loom's vision tower uses silu");
    const int64_t head_dim = c.num_heads > 0 ? c.hidden_size / c.num_heads : 0;
    if (c.depth < 1 || c.num_heads < 1 || c.hidden_size % c.num_heads != 0 || head_dim % 4 != 0)
        r.fail("num_heads", "must divide hidden_size into heads of a multiple of 4 channels");
    if (c.spatial_merge_size < 1 || c.patch_size < 1 ||
        c.window_size % (c.spatial_merge_size * c.patch_size) != 0)
        r.fail("window_size", "must be a multiple of spatial_merge_size x patch_size");
    return c;
}

Qwen2_5_Vision load_qwen2_5_vision(const fs::path& folder, at::ScalarType dtype) {
    Qwen2_5_Vision model(read_qwen2_5_vision_config(folder / "config.json"));
    model->to(dtype);
    std::vector<StoredTensor> mine;
    for (StoredTensor& s : stored_tensors_in(folder)) {
        for (const char* prefix : {"model.visual.", "visual."}) {
            if (s.name.rfind(prefix, 0) == 0) {
                s.name = s.name.substr(std::string(prefix).size());
                mine.push_back(std::move(s));
                break;
            }
        }
    }
    if (mine.empty()) {
        throw FormatError(folder.string(),
                          "has no vision tower (no weights under visual. or model.visual.); "
                          "Qwen-Image-Edit reads its control images with it: use the Edit "
                          "model's own text_encoder folder");
    }
    load_stored_tensors(*model, mine, "vision tower", folder.string(), "config.json");
    model->eval();
    return model;
}

}  // namespace loom
