#include "loom/model/vae/autoencoder_kl.h"

#include <ATen/ATen.h>

#include "loading/config_reader.h"
#include "loom/model/loading/diffusers_folder.h"
#include "loom/model/loading/weight_files.h"
#include "loom/model/nn/memory_format.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

constexpr double kVaeEps = 1e-6;

ResnetBlock2D vae_resnet(int64_t in, int64_t out, int64_t groups) {
    return ResnetBlock2D(ResnetBlock2DOptions{in, out, std::nullopt, groups, kVaeEps, 1.0});
}

torch::nn::GroupNorm vae_norm(int64_t groups, int64_t channels) {
    return torch::nn::GroupNorm(torch::nn::GroupNormOptions(groups, channels).eps(kVaeEps));
}

}  // namespace

VAEMidBlockImpl::VAEMidBlockImpl(int64_t channels, int64_t groups, bool add_attention) {
    resnets =
        register_module("resnets", torch::nn::ModuleList(vae_resnet(channels, channels, groups)));
    if (add_attention) {
        AttentionOptions o;  // one head over all channels, as the VAE's mid-block attention
        o.query_dim = channels;
        o.heads = 1;
        o.dim_head = channels;
        o.bias = true;
        o.norm_num_groups = groups;
        o.norm_eps = kVaeEps;
        o.residual_connection = true;
        attentions = register_module("attentions", torch::nn::ModuleList(Attention(o)));
    }
    resnets->push_back(vae_resnet(channels, channels, groups));
}

at::Tensor VAEMidBlockImpl::forward(const at::Tensor& x) {
    at::Tensor h = resnets[0]->as<ResnetBlock2DImpl>()->forward(x);
    if (attentions) h = attentions[0]->as<AttentionImpl>()->forward(h);
    return resnets[1]->as<ResnetBlock2DImpl>()->forward(h);
}

VAEDownBlockImpl::VAEDownBlockImpl(int64_t in, int64_t out, int64_t layers, int64_t groups,
                                   bool downsample) {
    resnets = register_module("resnets", torch::nn::ModuleList());
    for (int64_t l = 0; l < layers; ++l)
        resnets->push_back(vae_resnet(l == 0 ? in : out, out, groups));
    if (downsample) {
        downsamplers = register_module("downsamplers", torch::nn::ModuleList(Downsample2D(out, 0)));
    }
}

at::Tensor VAEDownBlockImpl::forward(const at::Tensor& x) {
    at::Tensor h = x;
    for (const auto& r : *resnets) h = r->as<ResnetBlock2DImpl>()->forward(h);
    if (downsamplers) h = downsamplers[0]->as<Downsample2DImpl>()->forward(h);
    return h;
}

VAEUpBlockImpl::VAEUpBlockImpl(int64_t in, int64_t out, int64_t layers, int64_t groups,
                               bool upsample) {
    resnets = register_module("resnets", torch::nn::ModuleList());
    for (int64_t l = 0; l < layers; ++l)
        resnets->push_back(vae_resnet(l == 0 ? in : out, out, groups));
    if (upsample)
        upsamplers = register_module("upsamplers", torch::nn::ModuleList(Upsample2D(out)));
}

at::Tensor VAEUpBlockImpl::forward(const at::Tensor& x) {
    at::Tensor h = x;
    for (const auto& r : *resnets) h = r->as<ResnetBlock2DImpl>()->forward(h);
    if (upsamplers) h = upsamplers[0]->as<Upsample2DImpl>()->forward(h);
    return h;
}

VAEEncoderImpl::VAEEncoderImpl(const VAEConfig& c) {
    const auto& ch = c.block_out_channels;
    conv_in = register_module("conv_in", Conv2d(c.in_channels, ch[0], 3, 1, 1));
    down_blocks = register_module("down_blocks", torch::nn::ModuleList());
    int64_t out = ch[0];
    for (std::size_t i = 0; i < ch.size(); ++i) {
        const int64_t in = out;
        out = ch[i];
        down_blocks->push_back(
            VAEDownBlock(in, out, c.layers_per_block, c.norm_num_groups, i + 1 < ch.size()));
    }
    mid_block = register_module(
        "mid_block", VAEMidBlock(ch.back(), c.norm_num_groups, c.mid_block_add_attention));
    conv_norm_out = register_module("conv_norm_out", vae_norm(c.norm_num_groups, ch.back()));
    conv_out = register_module("conv_out", Conv2d(ch.back(), 2 * c.latent_channels, 3, 1, 1));
}

at::Tensor VAEEncoderImpl::forward(const at::Tensor& x) {
    at::Tensor h = conv_in(x);
    for (const auto& block : *down_blocks) h = block->as<VAEDownBlockImpl>()->forward(h);
    h = mid_block(h);
    return conv_out(at::silu(conv_norm_out(h)));
}

VAEDecoderImpl::VAEDecoderImpl(const VAEConfig& c) {
    const auto& ch = c.block_out_channels;
    conv_in = register_module("conv_in", Conv2d(c.latent_channels, ch.back(), 3, 1, 1));
    mid_block = register_module(
        "mid_block", VAEMidBlock(ch.back(), c.norm_num_groups, c.mid_block_add_attention));
    up_blocks = register_module("up_blocks", torch::nn::ModuleList());
    const std::vector<int64_t> rev(ch.rbegin(), ch.rend());
    int64_t out = rev[0];
    for (std::size_t i = 0; i < rev.size(); ++i) {
        const int64_t prev = out;
        out = rev[i];
        up_blocks->push_back(
            VAEUpBlock(prev, out, c.layers_per_block + 1, c.norm_num_groups, i + 1 < rev.size()));
    }
    conv_norm_out = register_module("conv_norm_out", vae_norm(c.norm_num_groups, ch[0]));
    conv_out = register_module("conv_out", Conv2d(ch[0], c.out_channels, 3, 1, 1));
}

at::Tensor VAEDecoderImpl::forward(const at::Tensor& z) {
    at::Tensor h = mid_block(conv_in(z));
    for (const auto& block : *up_blocks) h = block->as<VAEUpBlockImpl>()->forward(h);
    return conv_out(at::silu(conv_norm_out(h)));
}

at::Tensor scaled_latents(const VAEConfig& config, const at::Tensor& z) {
    const at::Tensor shifted = config.shift_factor ? z - *config.shift_factor : z;
    return shifted * config.scaling_factor;
}

at::Tensor LatentDistribution::sample(const std::optional<at::Generator>& generator) const {
    const at::Tensor std = at::exp(0.5 * logvar);
    return mean + std * at::randn(mean.sizes(), generator, mean.options());
}

AutoencoderKLImpl::AutoencoderKLImpl(const VAEConfig& c) : config_(c) {
    encoder = register_module("encoder", VAEEncoder(c));
    decoder = register_module("decoder", VAEDecoder(c));
    if (c.use_quant_conv) {
        quant_conv =
            register_module("quant_conv", Conv2d(2 * c.latent_channels, 2 * c.latent_channels, 1));
    }
    if (c.use_post_quant_conv) {
        post_quant_conv =
            register_module("post_quant_conv", Conv2d(c.latent_channels, c.latent_channels, 1));
    }
}

LatentDistribution AutoencoderKLImpl::encode(const at::Tensor& image) {
    at::Tensor moments = encoder(channels_last_if(image, channels_last_));
    if (quant_conv) moments = quant_conv(moments);
    // The latents leave in the standard layout: they are cached, written and stacked as such.
    if (channels_last_) moments = moments.contiguous();
    const auto parts = moments.chunk(2, 1);
    return {parts[0], at::clamp(parts[1], -30.0, 20.0)};
}

at::Tensor AutoencoderKLImpl::decode(const at::Tensor& latents) {
    const at::Tensor in = channels_last_if(latents, channels_last_);
    const at::Tensor image = decoder(post_quant_conv ? post_quant_conv(in) : in);
    return channels_last_ ? image.contiguous() : image;
}

void AutoencoderKLImpl::set_channels_last(bool on) {
    channels_last_ = on;
    set_conv_weights_format(*this,
                            on ? c10::MemoryFormat::ChannelsLast : c10::MemoryFormat::Contiguous);
}

int64_t AutoencoderKLImpl::scale_factor() const {
    return int64_t{1} << (config_.block_out_channels.size() - 1);
}

VAEConfig read_vae_config(const fs::path& path) {
    const ConfigReader r(path);
    VAEConfig c;
    c.in_channels = r.integer("in_channels", 3);
    c.out_channels = r.integer("out_channels", 3);
    if (r.has("block_out_channels")) {
        c.block_out_channels = r.raw()["block_out_channels"].get<std::vector<int64_t>>();
    }
    const std::size_t n = c.block_out_channels.size();
    for (const std::string& t :
         r.texts("down_block_types", std::vector<std::string>(n, "DownEncoderBlock2D"))) {
        if (t != "DownEncoderBlock2D")
            r.fail("down_block_types", "entry '" + t + "' is not supported");
    }
    for (const std::string& t :
         r.texts("up_block_types", std::vector<std::string>(n, "UpDecoderBlock2D"))) {
        if (t != "UpDecoderBlock2D") r.fail("up_block_types", "entry '" + t + "' is not supported");
    }
    c.layers_per_block = r.integer("layers_per_block", 1);
    c.latent_channels = r.integer("latent_channels", 4);
    c.norm_num_groups = r.integer("norm_num_groups", 32);
    c.sample_size = r.integer("sample_size", 32);
    c.scaling_factor = r.number("scaling_factor", 0.18215);
    if (r.has("shift_factor")) c.shift_factor = r.number("shift_factor", 0.0);
    c.use_quant_conv = r.boolean("use_quant_conv", true);
    c.use_post_quant_conv = r.boolean("use_post_quant_conv", true);
    c.mid_block_add_attention = r.boolean("mid_block_add_attention", true);
    r.require_default<std::string>("act_fn", "silu");
    r.require_null("latents_mean");
    r.require_null("latents_std");
    return c;
}

AutoencoderKL load_vae(const DiffusersFolder& folder, at::ScalarType dtype) {
    return load_component(AutoencoderKL(read_vae_config(folder.dir("vae") / "config.json")),
                          folder.dir("vae"), dtype, "vae");
}

}  // namespace loom
