#include "loom/model/wan/wan_transformer.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "loading/config_reader.h"
#include "loom/core/error.h"
#include "loom/model/nn/checkpoint.h"
#include "nn/dit_ops.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

// A submodule `name` of `parent` holding parameters only (a norm's weight and bias), as the
// reference's state-dict nests them.
torch::nn::Module& holder(torch::nn::Module& parent, const char* name) {
    return *parent.register_module(name, std::make_shared<torch::nn::Module>());
}

// FP32LayerNorm: layer norm in float32 (weight and bias when given), in x's dtype.
at::Tensor fp32_layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           double eps) {
    const at::Tensor w = weight.defined() ? weight.to(at::kFloat) : at::Tensor();
    const at::Tensor b = bias.defined() ? bias.to(at::kFloat) : at::Tensor();
    return at::layer_norm(x.to(at::kFloat), {x.size(-1)}, w, b, eps).to(x.scalar_type());
}

// norm(x) * (1 + scale) + shift in float32 (the modulation is float32), back in x's dtype.
at::Tensor modulated(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale,
                     double eps) {
    const at::Tensor normed = at::layer_norm(x.to(at::kFloat), {x.size(-1)}, {}, {}, eps);
    return at::addcmul(shift, normed, 1 + scale).to(x.scalar_type());
}

// residual + y * gate in float32, back in the residual's dtype.
at::Tensor gated(const at::Tensor& residual, const at::Tensor& y, const at::Tensor& gate) {
    return at::addcmul(residual.to(at::kFloat), y.to(at::kFloat), gate).to(residual.scalar_type());
}

}  // namespace

WanRope wan_rope(const WanConfig& c, int64_t frames, int64_t rows, int64_t columns,
                 const at::Device& device) {
    const int64_t longest = std::max({frames, rows, columns});
    if (longest > c.rope_max_seq_len) {
        throw Error("Wan transformer: a clip of " + std::to_string(frames) + " x " +
                    std::to_string(rows) + " x " + std::to_string(columns) +
                    " patches has more positions on an axis than its rope_max_seq_len (" +
                    std::to_string(c.rope_max_seq_len) + ")");
    }
    const auto positions = [&](int64_t n) {
        return at::arange(n, at::TensorOptions().dtype(at::kDouble).device(device));
    };
    const auto [t_cos, t_sin] = dit::rotary_tables(positions(frames), c.rope_t_dim(), c.rope_theta);
    const auto [h_cos, h_sin] = dit::rotary_tables(positions(rows), c.rope_hw_dim(), c.rope_theta);
    const auto [w_cos, w_sin] =
        dit::rotary_tables(positions(columns), c.rope_hw_dim(), c.rope_theta);
    // Each patch's (frame, row, column) tables side by side, frames slowest.
    const auto grid = [&](const at::Tensor& t, const at::Tensor& h, const at::Tensor& w) {
        return at::cat({t.view({frames, 1, 1, -1}).expand({frames, rows, columns, -1}),
                        h.view({1, rows, 1, -1}).expand({frames, rows, columns, -1}),
                        w.view({1, 1, columns, -1}).expand({frames, rows, columns, -1})},
                       -1)
            .reshape({frames * rows * columns, -1});
    };
    return {grid(t_cos, h_cos, w_cos), grid(t_sin, h_sin, w_sin)};
}

WanAttentionImpl::WanAttentionImpl(int64_t dim, int64_t heads, double eps)
    : heads_(heads), eps_(eps) {
    to_q = register_module("to_q", Linear(dim, dim));
    to_k = register_module("to_k", Linear(dim, dim));
    to_v = register_module("to_v", Linear(dim, dim));
    auto out = register_module("to_out", torch::nn::ModuleList());
    to_out = Linear(dim, dim);
    out->push_back(to_out);
    norm_q_weight = holder(*this, "norm_q").register_parameter("weight", at::ones({dim}));
    norm_k_weight = holder(*this, "norm_k").register_parameter("weight", at::ones({dim}));
}

at::Tensor WanAttentionImpl::forward(const at::Tensor& x, const at::Tensor& context,
                                     const WanRope* rope) {
    const at::Tensor& source = rope != nullptr ? x : context;
    // RMS norms over all heads' channels at once, then split into heads.
    const auto split = [&](const at::Tensor& t) { return t.unflatten(-1, {heads_, -1}); };
    at::Tensor q = split(at::rms_norm(to_q(x), {x.size(-1)}, norm_q_weight, eps_));
    at::Tensor k = split(at::rms_norm(to_k(source), {x.size(-1)}, norm_k_weight, eps_));
    const at::Tensor v = split(to_v(source));
    if (rope != nullptr) {
        q = dit::apply_rotary(q, rope->cos, rope->sin);
        k = dit::apply_rotary(k, rope->cos, rope->sin);
    }
    return to_out(dit::attend(q, k, v));
}

WanTransformerBlockImpl::WanTransformerBlockImpl(const WanConfig& c) : config_(c) {
    const int64_t dim = c.inner_dim();
    attn1 = register_module("attn1", WanAttention(dim, c.num_attention_heads, c.eps));
    attn2 = register_module("attn2", WanAttention(dim, c.num_attention_heads, c.eps));
    if (c.cross_attn_norm) {
        torch::nn::Module& norm2 = holder(*this, "norm2");
        norm2_weight = norm2.register_parameter("weight", at::ones({dim}));
        norm2_bias = norm2.register_parameter("bias", at::zeros({dim}));
    }
    // FeedForward(activation_fn="gelu-approximate"): net.0.proj -> tanh GELU -> net.2
    torch::nn::Module& ffn = holder(*this, "ffn");
    auto net = ffn.register_module("net", torch::nn::ModuleList());
    auto gelu = std::make_shared<torch::nn::Module>();
    ffn_in = gelu->register_module("proj", Linear(dim, c.ffn_dim));
    net->push_back(gelu);
    net->push_back(std::make_shared<torch::nn::Module>());  // net.1: dropout
    ffn_out = Linear(c.ffn_dim, dim);
    net->push_back(ffn_out);
    scale_shift_table = register_parameter("scale_shift_table", at::zeros({1, 6, dim}));
}

at::Tensor WanTransformerBlockImpl::forward(const at::Tensor& x, const at::Tensor& context,
                                            const at::Tensor& timestep_proj, const WanRope& rope) {
    // shift, scale, gate of the self-attention; the same of the feed-forward: [B, 1, dim] each.
    const auto m = (scale_shift_table + timestep_proj.to(at::kFloat)).chunk(6, 1);
    at::Tensor h = x;
    h = gated(h, attn1->forward(modulated(h, m[0], m[1], config_.eps), at::Tensor(), &rope), m[2]);
    const at::Tensor normed =
        config_.cross_attn_norm ? fp32_layer_norm(h, norm2_weight, norm2_bias, config_.eps) : h;
    h = h + attn2->forward(normed, context, nullptr);
    const at::Tensor ff = ffn_out(at::gelu(ffn_in(modulated(h, m[3], m[4], config_.eps)), "tanh"));
    return gated(h, ff, m[5]);
}

WanTransformer3DModelImpl::WanTransformer3DModelImpl(const WanConfig& c) : config_(c) {
    const int64_t dim = c.inner_dim();
    if (c.rope_t_dim() <= 0 || c.rope_t_dim() % 2 != 0 || c.rope_hw_dim() <= 0) {
        throw Error("Wan config: attention_head_dim " + std::to_string(c.attention_head_dim) +
                    " cannot be split for RoPE (rows and columns 2 * (head_dim / 6) channels "
                    "each, frames an even rest)");
    }
    const auto& p = c.patch_size;
    patch_embedding = register_module(
        "patch_embedding",
        torch::nn::Conv3d(torch::nn::Conv3dOptions(c.in_channels, dim, {p[0], p[1], p[2]})
                              .stride({p[0], p[1], p[2]})));
    torch::nn::Module& condition = holder(*this, "condition_embedder");
    time_embedder = condition.register_module("time_embedder", TimestepEmbedding(c.freq_dim, dim));
    time_proj = condition.register_module("time_proj", Linear(dim, 6 * dim));
    // PixArtAlphaTextProjection(act_fn="gelu_tanh"): linear_1 -> tanh GELU -> linear_2
    torch::nn::Module& text = holder(condition, "text_embedder");
    text_embedder_1 = text.register_module("linear_1", Linear(c.text_dim, dim));
    text_embedder_2 = text.register_module("linear_2", Linear(dim, dim));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.num_layers; ++i) blocks->push_back(WanTransformerBlock(c));
    proj_out = register_module("proj_out", Linear(dim, c.out_channels * p[0] * p[1] * p[2]));
    scale_shift_table = register_parameter("scale_shift_table", at::zeros({1, 2, dim}));
}

at::Tensor WanTransformer3DModelImpl::forward(const at::Tensor& hidden_states,
                                              const at::Tensor& timestep,
                                              const at::Tensor& encoder_hidden_states) {
    TORCH_CHECK(hidden_states.dim() == 5, "the Wan transformer takes a clip [B, C, F, H, W], got ",
                hidden_states.sizes());
    TORCH_CHECK(timestep.dim() == 1,
                "the Wan transformer takes one timestep per clip ([B]); per-token timesteps "
                "(Wan 2.2) are not supported yet");
    const auto& p = config_.patch_size;
    const int64_t batch = hidden_states.size(0);
    const int64_t frames = hidden_states.size(2) / p[0];
    const int64_t rows = hidden_states.size(3) / p[1];
    const int64_t columns = hidden_states.size(4) / p[2];
    TORCH_CHECK(frames * p[0] == hidden_states.size(2) && rows * p[1] == hidden_states.size(3) &&
                    columns * p[2] == hidden_states.size(4),
                "the clip's frames, height and width must be multiples of the patch (", p[0], ", ",
                p[1], ", ", p[2], "), got ", hidden_states.sizes());
    const WanRope rope = wan_rope(config_, frames, rows, columns, hidden_states.device());

    // [B, dim, F, H, W] -> [B, F*H*W, dim]
    at::Tensor x = patch_embedding(hidden_states).flatten(2).transpose(1, 2).contiguous();
    const auto dtype = encoder_hidden_states.scalar_type();
    const at::Tensor sinusoids = timestep_embedding(timestep, config_.freq_dim, true, 0.0);
    const at::Tensor temb =
        time_embedder(sinusoids.to(time_embedder->parameters().front().scalar_type())).to(dtype);
    const at::Tensor timestep_proj = time_proj(at::silu(temb)).unflatten(1, {6, -1});
    const at::Tensor context =
        text_embedder_2(at::gelu(text_embedder_1(encoder_hidden_states), "tanh"));

    for (const auto& block : *blocks) {
        auto* b = block->as<WanTransformerBlockImpl>();
        if (!checkpointing_) {
            x = b->forward(x, context, timestep_proj, rope);
            continue;
        }
        // The rotary tables travel as inputs: the recompute must see these very tensors.
        x = checkpoint(
            [b](const std::vector<at::Tensor>& in) {
                return std::vector<at::Tensor>{
                    b->forward(in[0], in[1], in[2], WanRope{in[3], in[4]})};
            },
            {x, context, timestep_proj, rope.cos, rope.sin})[0];
    }

    const auto m = (scale_shift_table + temb.unsqueeze(1).to(at::kFloat)).chunk(2, 1);
    x = proj_out(modulated(x, m[0], m[1], config_.eps));
    // [B, F*H*W, pt*ph*pw*C] -> [B, C, F*pt, H*ph, W*pw]
    return x.reshape({batch, frames, rows, columns, p[0], p[1], p[2], -1})
        .permute({0, 7, 1, 4, 2, 5, 3, 6})
        .reshape({batch, -1, frames * p[0], rows * p[1], columns * p[2]});
}

WanConfig read_wan_config(const fs::path& path) {
    const ConfigReader r(path);
    WanConfig c;
    const std::vector<int64_t> patch = r.per_block("patch_size", 3, 0);
    if (r.has("patch_size")) std::copy(patch.begin(), patch.end(), c.patch_size.begin());
    for (const int64_t p : c.patch_size) {
        if (p <= 0) r.fail("patch_size", "entries must be positive");
    }
    c.num_attention_heads = r.integer("num_attention_heads", c.num_attention_heads);
    c.attention_head_dim = r.integer("attention_head_dim", c.attention_head_dim);
    c.in_channels = r.integer("in_channels", c.in_channels);
    c.out_channels = r.integer("out_channels", c.in_channels);  // null: in_channels
    c.text_dim = r.integer("text_dim", c.text_dim);
    c.freq_dim = r.integer("freq_dim", c.freq_dim);
    c.ffn_dim = r.integer("ffn_dim", c.ffn_dim);
    c.num_layers = r.integer("num_layers", c.num_layers);
    c.cross_attn_norm = r.boolean("cross_attn_norm", c.cross_attn_norm);
    c.eps = r.number("eps", c.eps);
    c.rope_max_seq_len = r.integer("rope_max_seq_len", c.rope_max_seq_len);
    r.require_default<std::string>("qk_norm", "rms_norm_across_heads");
    // Wan 2.1's image-to-video transformers: CLIP image tokens through added k/v projections.
    for (const char* key : {"image_dim", "added_kv_proj_dim", "pos_embed_seq_len"}) {
        if (r.has(key)) {
            r.fail(key,
                   "is set: an image-to-video Wan transformer, which loom does not support "
                   "yet (text-to-video only)");
        }
    }
    return c;  // the transformer checks that its heads split for RoPE
}

}  // namespace loom
