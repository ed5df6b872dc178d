#include "loom/model/flux/flux_transformer.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>
#include <numeric>

#include "loading/config_reader.h"
#include "loom/core/error.h"
#include "loom/model/nn/checkpoint.h"
#include "nn/dit_ops.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

at::Tensor apply_rope(const at::Tensor& x, const FluxRope& rope) {
    return dit::apply_rotary(x, rope.cos, rope.sin);
}

// [B, S, H*D] -> [B, S, H, D]
at::Tensor heads(const at::Tensor& x, int64_t head_dim) {
    return x.unflatten(-1, {-1, head_dim});
}

using dit::attend;

at::Tensor layer_norm(const at::Tensor& x) {
    return at::layer_norm(x, {x.size(-1)}, {}, {}, 1e-6);
}

// x * (1 + scale) + shift, broadcast over the sequence (one fused pass over x).
at::Tensor modulate(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale) {
    return at::addcmul(shift.unsqueeze(1), x, 1 + scale.unsqueeze(1));
}

// residual + gate * x, the gate broadcast over the sequence (one fused pass).
at::Tensor gated(const at::Tensor& residual, const at::Tensor& gate, const at::Tensor& x) {
    return at::addcmul(residual, gate.unsqueeze(1), x);
}

}  // namespace

FluxRMSNormImpl::FluxRMSNormImpl(int64_t dim, double eps) : eps_(eps) {
    weight = register_parameter("weight", at::ones({dim}));
}

at::Tensor FluxRMSNormImpl::forward(const at::Tensor& x) {
    return at::rms_norm(x, {x.size(-1)}, weight, eps_);
}

FluxQKV::FluxQKV(torch::nn::Module& attention, int64_t dim, int64_t dims_per_head, const Names& n)
    : head_dim(dims_per_head) {
    norm_q = attention.register_module(n.norm_q, FluxRMSNorm(head_dim, 1e-6));
    norm_k = attention.register_module(n.norm_k, FluxRMSNorm(head_dim, 1e-6));
    q = attention.register_module(n.q, Linear(dim, dim));
    k = attention.register_module(n.k, Linear(dim, dim));
    v = attention.register_module(n.v, Linear(dim, dim));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> FluxQKV::operator()(const at::Tensor& x) {
    return {norm_q->forward(heads(q->forward(x), head_dim)),
            norm_k->forward(heads(k->forward(x), head_dim)), heads(v->forward(x), head_dim)};
}

FluxRope flux_rope(const at::Tensor& ids, const std::vector<int64_t>& axes_dim, double theta) {
    TORCH_CHECK(ids.dim() == 2 && ids.size(1) == static_cast<int64_t>(axes_dim.size()),
                "Flux position ids must be [S, ", axes_dim.size(), "], got ", ids.sizes());
    // The reference's position ids are float32.
    const at::Tensor pos = ids.to(at::kFloat);
    std::vector<at::Tensor> cos, sin;
    for (std::size_t i = 0; i < axes_dim.size(); ++i) {
        auto [c, s] =
            dit::rotary_tables(pos.select(1, static_cast<int64_t>(i)), axes_dim[i], theta);
        cos.push_back(std::move(c));
        sin.push_back(std::move(s));
    }
    return {at::cat(cos, -1), at::cat(sin, -1)};
}

FluxTransformerBlockImpl::FluxTransformerBlockImpl(const FluxConfig& c, DoubleBlockLayout layout) {
    const int64_t dim = c.inner_dim();
    const bool qwen = layout == DoubleBlockLayout::kQwenImage;
    if (layout == DoubleBlockLayout::kFlux) {
        auto norm1 = register_module("norm1", std::make_shared<torch::nn::Module>());
        norm1_linear = norm1->register_module("linear", Linear(dim, 6 * dim));
        auto norm1_context =
            register_module("norm1_context", std::make_shared<torch::nn::Module>());
        norm1_context_linear = norm1_context->register_module("linear", Linear(dim, 6 * dim));
    } else if (qwen) {
        // img_mod = Sequential(SiLU, Linear): the Linear is entry 1.
        const auto modulation = [&](const char* name) {
            auto seq = register_module(name, torch::nn::ModuleList());
            seq->push_back(std::make_shared<torch::nn::Module>());  // 0: SiLU
            Linear linear(dim, 6 * dim);
            seq->push_back(linear);
            return linear;
        };
        norm1_linear = modulation("img_mod");
        norm1_context_linear = modulation("txt_mod");
    }
    auto attn = register_module("attn", std::make_shared<torch::nn::Module>());
    image_qkv_ = FluxQKV(*attn, dim, c.attention_head_dim, FluxQKV::kImage);
    auto out = attn->register_module("to_out", torch::nn::ModuleList());
    to_out = Linear(dim, dim);
    out->push_back(to_out);
    text_qkv_ = FluxQKV(*attn, dim, c.attention_head_dim, FluxQKV::kText);
    to_add_out = attn->register_module("to_add_out", Linear(dim, dim));
    // FeedForward(activation_fn="gelu-approximate"): net.0.proj -> tanh GELU -> net.2
    auto feed_forward = [&](const char* name, Linear& in, Linear& out_layer) {
        auto ff = register_module(name, std::make_shared<torch::nn::Module>());
        auto net = ff->register_module("net", torch::nn::ModuleList());
        auto gelu = std::make_shared<torch::nn::Module>();
        in = gelu->register_module("proj", Linear(dim, 4 * dim));
        net->push_back(gelu);
        net->push_back(std::make_shared<torch::nn::Module>());  // net.1: dropout
        out_layer = Linear(4 * dim, dim);
        net->push_back(out_layer);
    };
    feed_forward(qwen ? "img_mlp" : "ff", ff_in, ff_out);
    feed_forward(qwen ? "txt_mlp" : "ff_context", ff_context_in, ff_context_out);
}

std::pair<at::Tensor, at::Tensor> FluxTransformerBlockImpl::forward(const at::Tensor& hidden,
                                                                    const at::Tensor& context,
                                                                    const at::Tensor& temb,
                                                                    const FluxRope& rope,
                                                                    const at::Tensor& bias) {
    const at::Tensor silu = at::silu(temb);
    // shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp
    return forward_modulated(hidden, context, norm1_linear(silu).chunk(6, 1),
                             norm1_context_linear(silu).chunk(6, 1), rope, bias);
}

std::pair<at::Tensor, at::Tensor> FluxTransformerBlockImpl::forward_modulated(
    const at::Tensor& hidden, const at::Tensor& context, const FluxModulation& m,
    const FluxModulation& c, const FluxRope& rope, const at::Tensor& bias) {
    const at::Tensor x = modulate(layer_norm(hidden), m[0], m[1]);
    const at::Tensor cx = modulate(layer_norm(context), c[0], c[1]);

    // One attention over the joint sequence: text first, then image.
    const auto [tq, tk, tv] = text_qkv_(cx);
    const auto [iq, ik, iv] = image_qkv_(x);
    const at::Tensor joint =
        attend(apply_rope(at::cat({tq, iq}, 1), rope), apply_rope(at::cat({tk, ik}, 1), rope),
               at::cat({tv, iv}, 1), bias);
    const int64_t text = context.size(1);
    const at::Tensor context_attn = to_add_out(joint.narrow(1, 0, text).contiguous());
    const at::Tensor attn = to_out(joint.narrow(1, text, joint.size(1) - text).contiguous());

    at::Tensor h = gated(hidden, m[2], attn);
    h = gated(h, m[5], ff_out(at::gelu(ff_in(modulate(layer_norm(h), m[3], m[4])), "tanh")));
    at::Tensor ctx = gated(context, c[2], context_attn);
    ctx = gated(
        ctx, c[5],
        ff_context_out(at::gelu(ff_context_in(modulate(layer_norm(ctx), c[3], c[4])), "tanh")));
    return {ctx, h};
}

FluxSingleTransformerBlockImpl::FluxSingleTransformerBlockImpl(const FluxConfig& c,
                                                               bool modulation_linears) {
    const int64_t dim = c.inner_dim();
    const int64_t mlp = 4 * dim;
    if (modulation_linears) {
        auto norm = register_module("norm", std::make_shared<torch::nn::Module>());
        norm_linear = norm->register_module("linear", Linear(dim, 3 * dim));
    }
    proj_mlp = register_module("proj_mlp", Linear(dim, mlp));
    proj_out = register_module("proj_out", Linear(dim + mlp, dim));
    auto attn = register_module("attn", std::make_shared<torch::nn::Module>());
    qkv_ = FluxQKV(*attn, dim, c.attention_head_dim, FluxQKV::kImage);
}

at::Tensor FluxSingleTransformerBlockImpl::forward(const at::Tensor& x, const at::Tensor& temb,
                                                   const FluxRope& rope) {
    // shift, scale, gate
    return forward_modulated(x, norm_linear(at::silu(temb)).chunk(3, 1), rope, at::Tensor());
}

at::Tensor FluxSingleTransformerBlockImpl::forward_modulated(const at::Tensor& x,
                                                             const FluxModulation& m,
                                                             const FluxRope& rope,
                                                             const at::Tensor& bias) {
    const at::Tensor h = modulate(layer_norm(x), m[0], m[1]);
    const at::Tensor mlp = at::gelu(proj_mlp(h), "tanh");
    const auto [q, k, v] = qkv_(h);
    const at::Tensor attn = attend(apply_rope(q, rope), apply_rope(k, rope), v, bias);
    return gated(x, m[2], proj_out(at::cat({attn, mlp}, 2)));
}

FluxTransformer2DModelImpl::FluxTransformer2DModelImpl(const FluxConfig& c) : config_(c) {
    const int64_t dim = c.inner_dim();
    const int64_t rope_dims =
        std::accumulate(c.axes_dims_rope.begin(), c.axes_dims_rope.end(), int64_t{0});
    if (rope_dims != c.attention_head_dim || c.axes_dims_rope.size() != 3) {
        throw Error(
            "Flux config: axes_dims_rope must be three even sizes summing to "
            "attention_head_dim (" +
            std::to_string(c.attention_head_dim) + ")");
    }
    for (const int64_t d : c.axes_dims_rope) {
        if (d % 2 != 0) throw Error("Flux config: axes_dims_rope entries must be even");
    }
    x_embedder = register_module("x_embedder", Linear(c.in_channels, dim));
    context_embedder = register_module("context_embedder", Linear(c.joint_attention_dim, dim));
    auto time_text = register_module("time_text_embed", std::make_shared<torch::nn::Module>());
    timestep_embedder =
        time_text->register_module("timestep_embedder", TimestepEmbedding(256, dim));
    if (c.guidance_embeds) {
        guidance_embedder =
            time_text->register_module("guidance_embedder", TimestepEmbedding(256, dim));
    }
    auto text = time_text->register_module("text_embedder", std::make_shared<torch::nn::Module>());
    text_embedder_1 = text->register_module("linear_1", Linear(c.pooled_projection_dim, dim));
    text_embedder_2 = text->register_module("linear_2", Linear(dim, dim));
    transformer_blocks = register_module("transformer_blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.num_layers; ++i)
        transformer_blocks->push_back(FluxTransformerBlock(c));
    single_transformer_blocks =
        register_module("single_transformer_blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.num_single_layers; ++i) {
        single_transformer_blocks->push_back(FluxSingleTransformerBlock(c));
    }
    auto norm_out = register_module("norm_out", std::make_shared<torch::nn::Module>());
    norm_out_linear = norm_out->register_module("linear", Linear(dim, 2 * dim));
    proj_out = register_module("proj_out", Linear(dim, c.out_channels));
}

at::Tensor FluxTransformer2DModelImpl::forward(const FluxInputs& in) {
    at::Tensor hidden = x_embedder(in.hidden_states);
    const auto dtype = hidden.scalar_type();
    const auto pooled_dtype = in.pooled_projections.scalar_type();
    // CombinedTimestep(Guidance)TextProjEmbeddings: sinusoids of t x 1000 (flip to cos-first).
    auto embed_time = [&](TimestepEmbedding& embedder, const at::Tensor& t) {
        const at::Tensor scaled = t.to(dtype) * 1000;
        return embedder(timestep_embedding(scaled, 256, true, 0.0).to(pooled_dtype));
    };
    at::Tensor temb = embed_time(timestep_embedder, in.timestep);
    if (config_.guidance_embeds && !in.bypass_guidance_embedding) {
        TORCH_CHECK(in.guidance.defined(),
                    "this Flux transformer has a guidance embedding (dev): pass a guidance scale");
        temb = temb + embed_time(guidance_embedder, in.guidance);
    }
    temb = temb + text_embedder_2(at::silu(text_embedder_1(in.pooled_projections)));
    at::Tensor context = context_embedder(in.encoder_hidden_states);
    const FluxRope& rope = rope_for(at::cat({in.txt_ids, in.img_ids}, 0));
    for (const auto& block : *transformer_blocks) {
        auto* b = block->as<FluxTransformerBlockImpl>();
        if (!checkpointing_) {
            std::tie(context, hidden) = b->forward(hidden, context, temb, rope);
            continue;
        }
        // The rotary tables travel as inputs: the recompute must see these very tensors.
        const auto out = checkpoint(
            [b](const std::vector<at::Tensor>& in) {
                auto [c, h] = b->forward(in[0], in[1], in[2], FluxRope{in[3], in[4]});
                return std::vector<at::Tensor>{h, c};
            },
            {hidden, context, temb, rope.cos, rope.sin});
        hidden = out[0];
        context = out[1];
    }
    const int64_t text = context.size(1);
    at::Tensor joint = at::cat({context, hidden}, 1);
    for (const auto& block : *single_transformer_blocks) {
        auto* b = block->as<FluxSingleTransformerBlockImpl>();
        if (!checkpointing_) {
            joint = b->forward(joint, temb, rope);
            continue;
        }
        joint = checkpoint(
            [b](const std::vector<at::Tensor>& in) {
                return std::vector<at::Tensor>{b->forward(in[0], in[1], FluxRope{in[2], in[3]})};
            },
            {joint, temb, rope.cos, rope.sin})[0];
    }
    hidden = joint.narrow(1, text, joint.size(1) - text);
    // AdaLayerNormContinuous: scale first, then shift.
    const auto mod = norm_out_linear(at::silu(temb).to(hidden.scalar_type())).chunk(2, 1);
    return proj_out(modulate(layer_norm(hidden), mod[1], mod[0]));
}

const FluxRope& FluxTransformer2DModelImpl::rope_for(const at::Tensor& ids) {
    // Training repeats the same ids (one bucket, one prompt length) step after step.
    if (!rope_ids_.defined() || rope_ids_.sizes() != ids.sizes() ||
        rope_ids_.device() != ids.device() || !at::equal(rope_ids_, ids)) {
        rope_ = flux_rope(ids, config_.axes_dims_rope, config_.rope_theta);
        rope_ids_ = ids.clone();
    }
    return rope_;
}

at::Tensor flux_pack_latents(const at::Tensor& latents) {
    const int64_t b = latents.size(0), c = latents.size(1), h = latents.size(2),
                  w = latents.size(3);
    TORCH_CHECK(h % 2 == 0 && w % 2 == 0, "Flux latents need even height and width, got ", h, "x",
                w);
    return latents.view({b, c, h / 2, 2, w / 2, 2})
        .permute({0, 2, 4, 1, 3, 5})
        .reshape({b, (h / 2) * (w / 2), c * 4});
}

at::Tensor flux_unpack_latents(const at::Tensor& packed, int64_t height, int64_t width) {
    const int64_t b = packed.size(0), c = packed.size(2) / 4;
    return packed.view({b, height / 2, width / 2, c, 2, 2})
        .permute({0, 3, 1, 4, 2, 5})
        .reshape({b, c, height, width});
}

at::Tensor flux_image_ids(int64_t height, int64_t width, const at::TensorOptions& options) {
    const int64_t rows = height / 2, cols = width / 2;
    at::Tensor ids = at::zeros({rows, cols, 3}, options);
    ids.select(2, 1).add_(at::arange(rows, options).unsqueeze(1));
    ids.select(2, 2).add_(at::arange(cols, options).unsqueeze(0));
    return ids.reshape({rows * cols, 3});
}

at::Tensor flux_control_ids(int64_t height, int64_t width, const at::TensorOptions& options) {
    at::Tensor ids = flux_image_ids(height, width, options);
    ids.select(1, 0).fill_(1);
    return ids;
}

at::Tensor flux_text_ids(int64_t tokens, const at::TensorOptions& options) {
    return at::zeros({tokens, 3}, options);
}

FluxConfig read_flux_config(const fs::path& path) {
    const ConfigReader r(path);
    r.require_default<int64_t>("patch_size", 1);
    FluxConfig c;
    c.in_channels = r.integer("in_channels", c.in_channels);
    c.out_channels = r.integer("out_channels", c.in_channels);  // null: in_channels
    c.num_layers = r.integer("num_layers", c.num_layers);
    c.num_single_layers = r.integer("num_single_layers", c.num_single_layers);
    c.attention_head_dim = r.integer("attention_head_dim", c.attention_head_dim);
    c.num_attention_heads = r.integer("num_attention_heads", c.num_attention_heads);
    c.joint_attention_dim = r.integer("joint_attention_dim", c.joint_attention_dim);
    c.pooled_projection_dim = r.integer("pooled_projection_dim", c.pooled_projection_dim);
    c.guidance_embeds = r.boolean("guidance_embeds", false);
    c.axes_dims_rope = r.per_block("axes_dims_rope", 3, 0);
    if (!r.has("axes_dims_rope")) c.axes_dims_rope = {16, 56, 56};
    int64_t rope = 0;
    for (const int64_t d : c.axes_dims_rope) {
        if (d <= 0 || d % 2 != 0) r.fail("axes_dims_rope", "entries must be positive and even");
        rope += d;
    }
    if (rope != c.attention_head_dim) {
        r.fail("axes_dims_rope", "must sum to attention_head_dim (" +
                                     std::to_string(c.attention_head_dim) + "), not " +
                                     std::to_string(rope));
    }
    if (c.in_channels % 4 != 0) {
        r.fail("in_channels", "must be 4 x the VAE's latent channels (2x2 packing)");
    }
    return c;
}

}  // namespace loom
