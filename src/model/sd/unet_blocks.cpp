#include "loom/model/sd/unet_blocks.h"

#include <ATen/ATen.h>

#include "loom/model/nn/checkpoint.h"

namespace loom {

namespace {

ResnetBlock2D make_resnet(int64_t in, int64_t out, const UNetBlockOptions& o) {
    return ResnetBlock2D(
        ResnetBlock2DOptions{in, out, o.temb_channels, o.groups, o.eps, o.output_scale_factor});
}

Transformer2DModel make_transformer(int64_t channels, const UNetBlockOptions& o) {
    return Transformer2DModel(Transformer2DOptions{channels, o.heads, channels / o.heads,
                                                   o.transformer_layers, o.cross_attention_dim,
                                                   o.groups, o.use_linear_projection});
}

void set_transformers_checkpointing(torch::nn::ModuleList& attentions, bool on) {
    for (const auto& m : *attentions)
        m->as<Transformer2DModelImpl>()->set_gradient_checkpointing(on);
}

}  // namespace

at::Tensor run_resnet(ResnetBlock2DImpl& resnet, const at::Tensor& x, const at::Tensor& temb,
                      bool checkpointing) {
    if (!checkpointing) return resnet.forward(x, temb);
    ResnetBlock2DImpl* r = &resnet;
    return checkpoint(
        [r](const std::vector<at::Tensor>& in) {
            return std::vector<at::Tensor>{r->forward(in[0], in[1])};
        },
        {x, temb})[0];
}

DownBlockImpl::DownBlockImpl(const UNetBlockOptions& o) {
    resnets = register_module("resnets", torch::nn::ModuleList());
    if (o.has_cross_attention) attentions = register_module("attentions", torch::nn::ModuleList());
    for (int64_t i = 0; i < o.num_layers; ++i) {
        resnets->push_back(make_resnet(i == 0 ? o.in_channels : o.out_channels, o.out_channels, o));
        if (o.has_cross_attention) attentions->push_back(make_transformer(o.out_channels, o));
    }
    if (o.add_sample_layer) {
        downsamplers = register_module("downsamplers", torch::nn::ModuleList(Downsample2D(
                                                           o.out_channels, o.downsample_padding)));
    }
}

DownBlockOutput DownBlockImpl::forward(const at::Tensor& x, const at::Tensor& temb,
                                       const at::Tensor& context) {
    DownBlockOutput out;
    at::Tensor h = x;
    for (std::size_t i = 0; i < resnets->size(); ++i) {
        h = run_resnet(*resnets[i]->as<ResnetBlock2DImpl>(), h, temb, checkpointing_);
        if (attentions) h = attentions[i]->as<Transformer2DModelImpl>()->forward(h, context);
        out.skips.push_back(h);
    }
    if (downsamplers) {
        h = downsamplers[0]->as<Downsample2DImpl>()->forward(h);
        out.skips.push_back(h);
    }
    out.hidden = h;
    return out;
}

void DownBlockImpl::set_gradient_checkpointing(bool on) {
    checkpointing_ = on;
    if (attentions) set_transformers_checkpointing(attentions, on);
}

MidBlockCrossAttnImpl::MidBlockCrossAttnImpl(const UNetBlockOptions& o) {
    resnets = register_module("resnets", torch::nn::ModuleList());
    attentions = register_module("attentions", torch::nn::ModuleList());
    resnets->push_back(make_resnet(o.in_channels, o.in_channels, o));
    for (int64_t i = 0; i < o.num_layers; ++i) {
        attentions->push_back(make_transformer(o.in_channels, o));
        resnets->push_back(make_resnet(o.in_channels, o.in_channels, o));
    }
}

at::Tensor MidBlockCrossAttnImpl::forward(const at::Tensor& x, const at::Tensor& temb,
                                          const at::Tensor& context) {
    at::Tensor h = run_resnet(*resnets[0]->as<ResnetBlock2DImpl>(), x, temb, checkpointing_);
    for (std::size_t i = 0; i < attentions->size(); ++i) {
        h = attentions[i]->as<Transformer2DModelImpl>()->forward(h, context);
        h = run_resnet(*resnets[i + 1]->as<ResnetBlock2DImpl>(), h, temb, checkpointing_);
    }
    return h;
}

void MidBlockCrossAttnImpl::set_gradient_checkpointing(bool on) {
    checkpointing_ = on;
    set_transformers_checkpointing(attentions, on);
}

UpBlockImpl::UpBlockImpl(const UNetBlockOptions& o) {
    resnets = register_module("resnets", torch::nn::ModuleList());
    if (o.has_cross_attention) attentions = register_module("attentions", torch::nn::ModuleList());
    for (int64_t i = 0; i < o.num_layers; ++i) {
        const int64_t skip = (i == o.num_layers - 1) ? o.in_channels : o.out_channels;
        const int64_t resnet_in = (i == 0) ? o.prev_output_channels : o.out_channels;
        resnets->push_back(make_resnet(resnet_in + skip, o.out_channels, o));
        if (o.has_cross_attention) attentions->push_back(make_transformer(o.out_channels, o));
    }
    if (o.add_sample_layer) {
        upsamplers =
            register_module("upsamplers", torch::nn::ModuleList(Upsample2D(o.out_channels)));
    }
}

at::Tensor UpBlockImpl::forward(const at::Tensor& x, std::vector<at::Tensor> skips,
                                const at::Tensor& temb, const at::Tensor& context,
                                std::optional<std::vector<int64_t>> upsample_size) {
    at::Tensor h = x;
    for (std::size_t i = 0; i < resnets->size(); ++i) {
        const at::Tensor skip = skips.back();
        skips.pop_back();
        h = at::cat({h, skip}, 1);
        h = run_resnet(*resnets[i]->as<ResnetBlock2DImpl>(), h, temb, checkpointing_);
        if (attentions) h = attentions[i]->as<Transformer2DModelImpl>()->forward(h, context);
    }
    if (upsamplers) h = upsamplers[0]->as<Upsample2DImpl>()->forward(h, upsample_size);
    return h;
}

void UpBlockImpl::set_gradient_checkpointing(bool on) {
    checkpointing_ = on;
    if (attentions) set_transformers_checkpointing(attentions, on);
}

}  // namespace loom
