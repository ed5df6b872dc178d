#include "loom/model/sd/unet_2d_condition.h"

#include <ATen/ATen.h>

#include "loading/config_reader.h"
#include "loom/core/error.h"
#include "loom/model/nn/memory_format.h"

namespace loom {

namespace fs = std::filesystem;

UNet2DConditionModelImpl::UNet2DConditionModelImpl(const UNetConfig& c) : config_(c) {
    const std::size_t n = c.block_out_channels.size();
    if (c.down_block_types.size() != n || c.up_block_types.size() != n ||
        c.layers_per_block.size() != n || c.num_attention_heads.size() != n ||
        c.cross_attention_dim.size() != n || c.transformer_layers_per_block.size() != n) {
        throw Error("UNet config: per-block lists must all have " + std::to_string(n) +
                    " entries (one per block_out_channels entry)");
    }
    const int64_t time_embed_dim = c.block_out_channels[0] * 4;
    conv_in = register_module("conv_in", Conv2d(c.in_channels, c.block_out_channels[0], 3, 1, 1));
    time_embedding = register_module("time_embedding",
                                     TimestepEmbedding(c.block_out_channels[0], time_embed_dim));
    if (c.addition_embed_type) {
        if (*c.addition_embed_type != "text_time") {
            throw Error("UNet config: addition_embed_type '" + *c.addition_embed_type +
                        "' is not supported (loom supports text_time, as SDXL uses)");
        }
        add_embedding = register_module(
            "add_embedding",
            TimestepEmbedding(c.projection_class_embeddings_input_dim, time_embed_dim));
    }

    down_blocks = register_module("down_blocks", torch::nn::ModuleList());
    int64_t output_channel = c.block_out_channels[0];
    for (std::size_t i = 0; i < n; ++i) {
        const int64_t input_channel = output_channel;
        output_channel = c.block_out_channels[i];
        const std::string& type = c.down_block_types[i];
        if (type != "CrossAttnDownBlock2D" && type != "DownBlock2D") {
            throw Error("UNet config: down block type '" + type + "' is not supported");
        }
        UNetBlockOptions o{input_channel, output_channel, 0, time_embed_dim, c.layers_per_block[i]};
        o.has_cross_attention = type == "CrossAttnDownBlock2D";
        o.transformer_layers = c.transformer_layers_per_block[i];
        o.heads = c.num_attention_heads[i];
        o.cross_attention_dim = c.cross_attention_dim[i];
        o.use_linear_projection = c.use_linear_projection;
        o.groups = c.norm_num_groups;
        o.eps = c.norm_eps;
        o.add_sample_layer = i + 1 < n;
        o.downsample_padding = c.downsample_padding;
        down_blocks->push_back(DownBlock(o));
    }

    UNetBlockOptions mid{c.block_out_channels.back(), c.block_out_channels.back(), 0,
                         time_embed_dim, 1};
    mid.has_cross_attention = true;
    mid.transformer_layers = c.transformer_layers_per_block.back();
    mid.heads = c.num_attention_heads.back();
    mid.cross_attention_dim = c.cross_attention_dim.back();
    mid.use_linear_projection = c.use_linear_projection;
    mid.groups = c.norm_num_groups;
    mid.eps = c.norm_eps;
    mid.output_scale_factor = c.mid_block_scale_factor;
    mid_block = register_module("mid_block", MidBlockCrossAttn(mid));

    std::vector<int64_t> rev_channels(c.block_out_channels.rbegin(), c.block_out_channels.rend());
    std::vector<int64_t> rev_heads(c.num_attention_heads.rbegin(), c.num_attention_heads.rend());
    std::vector<int64_t> rev_layers(c.layers_per_block.rbegin(), c.layers_per_block.rend());
    std::vector<int64_t> rev_cross(c.cross_attention_dim.rbegin(), c.cross_attention_dim.rend());
    std::vector<int64_t> rev_transformer =
        c.reverse_transformer_layers_per_block.empty()
            ? std::vector<int64_t>(c.transformer_layers_per_block.rbegin(),
                                   c.transformer_layers_per_block.rend())
            : c.reverse_transformer_layers_per_block;
    up_blocks = register_module("up_blocks", torch::nn::ModuleList());
    output_channel = rev_channels[0];
    for (std::size_t i = 0; i < n; ++i) {
        const bool is_final = i + 1 == n;
        const int64_t prev_output_channel = output_channel;
        output_channel = rev_channels[i];
        const int64_t input_channel = rev_channels[std::min(i + 1, n - 1)];
        const std::string& type = c.up_block_types[i];
        if (type != "CrossAttnUpBlock2D" && type != "UpBlock2D") {
            throw Error("UNet config: up block type '" + type + "' is not supported");
        }
        UNetBlockOptions o{input_channel, output_channel, prev_output_channel, time_embed_dim,
                           rev_layers[i] + 1};
        o.has_cross_attention = type == "CrossAttnUpBlock2D";
        o.transformer_layers = rev_transformer[i];
        o.heads = rev_heads[i];
        o.cross_attention_dim = rev_cross[i];
        o.use_linear_projection = c.use_linear_projection;
        o.groups = c.norm_num_groups;
        o.eps = c.norm_eps;
        o.add_sample_layer = !is_final;
        if (!is_final) ++num_upsamplers_;
        up_blocks->push_back(UpBlock(o));
    }
    conv_norm_out = register_module(
        "conv_norm_out",
        torch::nn::GroupNorm(torch::nn::GroupNormOptions(c.norm_num_groups, c.block_out_channels[0])
                                 .eps(c.norm_eps)));
    conv_out =
        register_module("conv_out", Conv2d(c.block_out_channels[0], c.out_channels, 3, 1, 1));
}

at::Tensor UNet2DConditionModelImpl::forward(const at::Tensor& sample, const at::Tensor& timestep,
                                             const at::Tensor& context,
                                             const at::Tensor& text_embeds,
                                             const at::Tensor& time_ids) {
    const int64_t batch = sample.size(0);
    const int64_t up_factor = int64_t{1} << num_upsamplers_;
    const bool forward_upsample_size =
        sample.size(2) % up_factor != 0 || sample.size(3) % up_factor != 0;

    at::Tensor t = timestep.dim() == 0 ? timestep.unsqueeze(0) : timestep;
    t = t.to(sample.device()).expand({batch});
    at::Tensor t_emb = timestep_embedding(t, config_.block_out_channels[0], config_.flip_sin_to_cos,
                                          config_.freq_shift)
                           .to(sample.scalar_type());
    at::Tensor emb = time_embedding(t_emb);
    if (add_embedding) {
        TORCH_CHECK(text_embeds.defined() && time_ids.defined(),
                    "this UNet (addition_embed_type text_time, SDXL) needs text_embeds and "
                    "time_ids");
        at::Tensor time_embeds =
            timestep_embedding(time_ids.flatten(), config_.addition_time_embed_dim,
                               config_.flip_sin_to_cos, config_.freq_shift);
        time_embeds = time_embeds.reshape({text_embeds.size(0), -1});
        const at::Tensor add_embeds =
            at::cat({text_embeds, time_embeds.to(text_embeds.dtype())}, -1);
        emb = emb + add_embedding(add_embeds.to(emb.dtype()));
    }

    at::Tensor h = conv_in(channels_last_if(sample, channels_last_));
    std::vector<at::Tensor> skips = {h};
    for (const auto& m : *down_blocks) {
        DownBlockOutput out = m->as<DownBlockImpl>()->forward(h, emb, context);
        h = out.hidden;
        skips.insert(skips.end(), out.skips.begin(), out.skips.end());
    }
    h = mid_block(h, emb, context);
    for (std::size_t i = 0; i < up_blocks->size(); ++i) {
        auto* block = up_blocks[i]->as<UpBlockImpl>();
        const std::size_t take = block->num_resnets();
        std::vector<at::Tensor> block_skips(skips.end() - static_cast<long>(take), skips.end());
        skips.resize(skips.size() - take);
        std::optional<std::vector<int64_t>> upsample_size;
        if (i + 1 < up_blocks->size() && forward_upsample_size) {
            upsample_size = std::vector<int64_t>{skips.back().size(2), skips.back().size(3)};
        }
        h = block->forward(h, std::move(block_skips), emb, context, upsample_size);
    }
    const at::Tensor out = conv_out(at::silu(conv_norm_out(h)));
    // [B, C_out, H, W] back in the caller's layout: losses, samplers and caches see one layout.
    return channels_last_ ? out.contiguous(sample.suggest_memory_format()) : out;
}

void UNet2DConditionModelImpl::set_channels_last(bool on) {
    channels_last_ = on;
    set_conv_weights_format(*this,
                            on ? c10::MemoryFormat::ChannelsLast : c10::MemoryFormat::Contiguous);
}

void UNet2DConditionModelImpl::set_gradient_checkpointing(bool on) {
    checkpointing_ = on;
    for (const auto& m : *down_blocks) m->as<DownBlockImpl>()->set_gradient_checkpointing(on);
    mid_block->set_gradient_checkpointing(on);
    for (const auto& m : *up_blocks) m->as<UpBlockImpl>()->set_gradient_checkpointing(on);
}

UNetConfig read_unet_config(const fs::path& path) {
    const ConfigReader r(path);
    UNetConfig c;
    c.in_channels = r.integer("in_channels", 4);
    c.out_channels = r.integer("out_channels", 4);
    c.sample_size = r.integer("sample_size", 64);
    c.down_block_types = r.texts("down_block_types", c.down_block_types);
    c.up_block_types = r.texts("up_block_types", c.up_block_types);
    if (r.has("block_out_channels")) {
        c.block_out_channels = r.raw()["block_out_channels"].get<std::vector<int64_t>>();
    }
    const std::size_t n = c.block_out_channels.size();
    if (c.down_block_types.size() != n || c.up_block_types.size() != n) {
        r.fail("down_block_types", "and up_block_types must have one entry per block_out_channels");
    }
    c.layers_per_block = r.per_block("layers_per_block", n, 2);
    // The diffusers trap: "attention_head_dim" is the number of heads unless
    // num_attention_heads is given.
    c.num_attention_heads = r.has("num_attention_heads") ? r.per_block("num_attention_heads", n, 8)
                                                         : r.per_block("attention_head_dim", n, 8);
    c.cross_attention_dim = r.per_block("cross_attention_dim", n, 1280);
    c.transformer_layers_per_block = r.per_block("transformer_layers_per_block", n, 1);
    if (r.has("reverse_transformer_layers_per_block")) {
        r.fail("reverse_transformer_layers_per_block", "is not supported by loom");
    }
    c.downsample_padding = r.integer("downsample_padding", 1);
    c.mid_block_scale_factor = r.number("mid_block_scale_factor", 1.0);
    c.norm_num_groups = r.integer("norm_num_groups", 32);
    c.norm_eps = r.number("norm_eps", 1e-5);
    c.use_linear_projection = r.boolean("use_linear_projection", false);
    c.flip_sin_to_cos = r.boolean("flip_sin_to_cos", true);
    c.freq_shift = r.number("freq_shift", 0.0);
    if (r.has("addition_embed_type")) c.addition_embed_type = r.text("addition_embed_type", "");
    c.addition_time_embed_dim = r.integer("addition_time_embed_dim", 256);
    c.projection_class_embeddings_input_dim =
        r.integer("projection_class_embeddings_input_dim", 2816);
    r.require_default<std::string>("mid_block_type", "UNetMidBlock2DCrossAttn");
    r.require_default<std::string>("act_fn", "silu");
    r.require_default<std::string>("time_embedding_type", "positional");
    r.require_default<std::string>("resnet_time_scale_shift", "default");
    r.require_default<std::string>("attention_type", "default");
    r.require_default<bool>("center_input_sample", false);
    r.require_default<bool>("dual_cross_attention", false);
    r.require_default<bool>("only_cross_attention", false);
    r.require_default<bool>("resnet_skip_time_act", false);
    r.require_default<bool>("class_embeddings_concat", false);
    r.require_default<int64_t>("conv_in_kernel", 3);
    r.require_default<int64_t>("conv_out_kernel", 3);
    r.require_default<double>("resnet_out_scale_factor", 1.0);
    for (const char* key : {"class_embed_type", "encoder_hid_dim", "encoder_hid_dim_type",
                            "num_class_embeds", "time_embedding_dim", "time_embedding_act_fn",
                            "timestep_post_act", "time_cond_proj_dim", "cross_attention_norm"}) {
        r.require_null(key);
    }
    return c;
}

}  // namespace loom
