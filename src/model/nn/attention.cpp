#include "loom/model/nn/attention.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/dropout.h>

#include "loom/model/nn/checkpoint.h"

namespace loom {

AttentionImpl::AttentionImpl(const AttentionOptions& o) : options_(o) {
    const int64_t inner = o.heads * o.dim_head;
    const int64_t kv_dim = o.cross_attention_dim.value_or(o.query_dim);
    if (o.norm_num_groups) {
        group_norm = register_module(
            "group_norm",
            torch::nn::GroupNorm(
                torch::nn::GroupNormOptions(*o.norm_num_groups, o.query_dim).eps(o.norm_eps)));
    }
    to_q = register_module("to_q", Linear(o.query_dim, inner, o.bias));
    to_k = register_module("to_k", Linear(kv_dim, inner, o.bias));
    to_v = register_module("to_v", Linear(kv_dim, inner, o.bias));
    to_out =
        register_module("to_out", torch::nn::ModuleList(Linear(inner, o.query_dim, o.out_bias)));
}

at::Tensor AttentionImpl::forward(const at::Tensor& input, const at::Tensor& context) {
    at::Tensor x = input;
    const bool spatial = x.dim() == 4;
    int64_t batch = x.size(0);
    int64_t channels = 0;
    int64_t height = 0;
    int64_t width = 0;
    if (spatial) {
        channels = x.size(1);
        height = x.size(2);
        width = x.size(3);
        x = x.view({batch, channels, height * width}).transpose(1, 2);  // [B, HW, C]
    }
    if (group_norm) x = group_norm(x.transpose(1, 2)).transpose(1, 2);
    const at::Tensor kv = context.defined() ? context : x;
    const int64_t heads = options_.heads;
    const int64_t dim_head = options_.dim_head;
    // [B, N, heads*dim_head] -> [B, heads, N, dim_head]
    auto split_heads = [&](const at::Tensor& t) {
        return t.view({batch, -1, heads, dim_head}).transpose(1, 2);
    };
    const at::Tensor q = split_heads(to_q(x));
    const at::Tensor k = split_heads(to_k(kv));
    const at::Tensor v = split_heads(to_v(kv));
    at::Tensor out = at::scaled_dot_product_attention(q, k, v);
    out = out.transpose(1, 2).reshape({batch, -1, heads * dim_head});
    out = to_out[0]->as<LinearImpl>()->forward(out);
    if (spatial) out = out.transpose(-1, -2).reshape({batch, channels, height, width});
    if (options_.residual_connection) out = out + input;
    if (options_.rescale_output_factor != 1.0) out = out / options_.rescale_output_factor;
    return out;
}

GEGLUImpl::GEGLUImpl(int64_t dim_in, int64_t dim_out) {
    proj = register_module("proj", Linear(dim_in, dim_out * 2));
}

at::Tensor GEGLUImpl::forward(const at::Tensor& x) {
    const auto parts = proj(x).chunk(2, -1);
    return parts[0] * at::gelu(parts[1]);
}

FeedForwardImpl::FeedForwardImpl(int64_t dim, int64_t mult) {
    const int64_t inner = dim * mult;
    net = register_module("net", torch::nn::ModuleList(GEGLU(dim, inner), torch::nn::Dropout(0.0),
                                                       Linear(inner, dim)));
}

at::Tensor FeedForwardImpl::forward(const at::Tensor& x) {
    return net[2]->as<LinearImpl>()->forward(net[0]->as<GEGLUImpl>()->forward(x));
}

BasicTransformerBlockImpl::BasicTransformerBlockImpl(int64_t dim, int64_t heads, int64_t dim_head,
                                                     int64_t cross_attention_dim) {
    auto layer_norm = [dim] {
        return torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(1e-5));
    };
    norm1 = register_module("norm1", layer_norm());
    AttentionOptions self_attention;
    self_attention.query_dim = dim;
    self_attention.heads = heads;
    self_attention.dim_head = dim_head;
    attn1 = register_module("attn1", Attention(self_attention));
    norm2 = register_module("norm2", layer_norm());
    AttentionOptions cross_attention = self_attention;
    cross_attention.cross_attention_dim = cross_attention_dim;
    attn2 = register_module("attn2", Attention(cross_attention));
    norm3 = register_module("norm3", layer_norm());
    ff = register_module("ff", FeedForward(dim));
}

at::Tensor BasicTransformerBlockImpl::forward(const at::Tensor& x, const at::Tensor& context) {
    at::Tensor h = attn1(norm1(x)) + x;
    h = attn2(norm2(h), context) + h;
    return ff(norm3(h)) + h;
}

Transformer2DModelImpl::Transformer2DModelImpl(const Transformer2DOptions& o)
    : linear_projection_(o.use_linear_projection) {
    const int64_t inner = o.heads * o.dim_head;
    norm = register_module(
        "norm", torch::nn::GroupNorm(
                    torch::nn::GroupNormOptions(o.norm_num_groups, o.in_channels).eps(1e-6)));
    if (linear_projection_) {
        proj_in = register_module("proj_in", std::make_shared<LinearImpl>(o.in_channels, inner));
    } else {
        proj_in = register_module("proj_in", std::make_shared<Conv2dImpl>(o.in_channels, inner, 1));
    }
    transformer_blocks = register_module("transformer_blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < o.num_layers; ++i) {
        transformer_blocks->push_back(
            BasicTransformerBlock(inner, o.heads, o.dim_head, o.cross_attention_dim));
    }
    if (linear_projection_) {
        proj_out = register_module("proj_out", std::make_shared<LinearImpl>(inner, o.in_channels));
    } else {
        proj_out =
            register_module("proj_out", std::make_shared<Conv2dImpl>(inner, o.in_channels, 1));
    }
}

at::Tensor Transformer2DModelImpl::forward(const at::Tensor& x, const at::Tensor& context) {
    const int64_t batch = x.size(0);
    const int64_t height = x.size(2);
    const int64_t width = x.size(3);
    at::Tensor h = norm(x);
    int64_t inner = 0;
    if (!linear_projection_) {
        h = proj_in->as<Conv2dImpl>()->forward(h);
        inner = h.size(1);
        h = h.permute({0, 2, 3, 1}).reshape({batch, height * width, inner});
    } else {
        inner = h.size(1);
        h = h.permute({0, 2, 3, 1}).reshape({batch, height * width, inner});
        h = proj_in->as<LinearImpl>()->forward(h);
        inner = h.size(2);
    }
    for (const auto& module : *transformer_blocks) {
        auto* block = module->as<BasicTransformerBlockImpl>();
        if (checkpointing_) {  // checkpoint() runs plainly when grad is off
            h = checkpoint(
                [block](const std::vector<at::Tensor>& in) {
                    return std::vector<at::Tensor>{block->forward(in[0], in[1])};
                },
                {h, context})[0];
        } else {
            h = block->forward(h, context);
        }
    }
    if (!linear_projection_) {
        // Back in the input's layout: a channels-last input (perf.channels_last) gets this
        // [B, H, W, C] memory as it is, without a copy.
        h = h.reshape({batch, height, width, inner})
                .permute({0, 3, 1, 2})
                .contiguous(x.suggest_memory_format());
        h = proj_out->as<Conv2dImpl>()->forward(h);
    } else {
        h = proj_out->as<LinearImpl>()->forward(h);
        h = h.reshape({batch, height, width, -1})
                .permute({0, 3, 1, 2})
                .contiguous(x.suggest_memory_format());
    }
    return h + x;
}

}  // namespace loom
