#include "loom/model/chroma/chroma_transformer.h"

#include <ATen/ATen.h>

#include "loading/config_reader.h"
#include "loom/model/loading/weight_files.h"
#include "loom/model/nn/checkpoint.h"
#include "loom/model/nn/embeddings.h"

namespace loom {

ChromaApproximatorImpl::ChromaApproximatorImpl(int64_t in_dim, int64_t out_dim, int64_t hidden_dim,
                                               int64_t layers) {
    in_proj = register_module("in_proj", Linear(in_dim, hidden_dim));
    auto projections = register_module("layers", torch::nn::ModuleList());
    auto norms = register_module("norms", torch::nn::ModuleList());
    for (int64_t i = 0; i < layers; ++i) {
        // PixArtAlphaTextProjection(act_fn="silu"): linear_1, SiLU, linear_2.
        auto projection = std::make_shared<torch::nn::Module>();
        linear_1_.push_back(
            projection->register_module("linear_1", Linear(hidden_dim, hidden_dim)));
        linear_2_.push_back(
            projection->register_module("linear_2", Linear(hidden_dim, hidden_dim)));
        projections->push_back(projection);
        auto norm = std::make_shared<torch::nn::Module>();
        norm_weights_.push_back(norm->register_parameter("weight", at::ones({hidden_dim})));
        norms->push_back(norm);
    }
    out_proj = register_module("out_proj", Linear(hidden_dim, out_dim));
}

at::Tensor ChromaApproximatorImpl::forward(const at::Tensor& input) {
    at::Tensor x = in_proj(input);
    for (std::size_t i = 0; i < linear_1_.size(); ++i) {
        // nn.RMSNorm(hidden_dim) with eps None: the dtype's machine epsilon, as at::rms_norm's.
        const at::Tensor normed = at::rms_norm(x, {x.size(-1)}, norm_weights_[i], std::nullopt);
        x = x + linear_2_[i](at::silu(linear_1_[i](normed)));
    }
    return out_proj(x);
}

ChromaTransformer2DModelImpl::ChromaTransformer2DModelImpl(const ChromaConfig& c) : config_(c) {
    const FluxConfig& f = c.flux;
    const int64_t dim = f.inner_dim();
    TORCH_CHECK(c.approximator_num_channels % 4 == 0,
                "Chroma config: approximator_num_channels must be a multiple of 4");
    x_embedder = register_module("x_embedder", Linear(f.in_channels, dim));
    context_embedder = register_module("context_embedder", Linear(f.joint_attention_dim, dim));
    distilled_guidance_layer =
        register_module("distilled_guidance_layer",
                        ChromaApproximator(c.approximator_num_channels, dim,
                                           c.approximator_hidden_dim, c.approximator_layers));
    transformer_blocks = register_module("transformer_blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < f.num_layers; ++i)
        transformer_blocks->push_back(FluxTransformerBlock(f, DoubleBlockLayout::kPruned));
    single_transformer_blocks =
        register_module("single_transformer_blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < f.num_single_layers; ++i) {
        single_transformer_blocks->push_back(
            FluxSingleTransformerBlock(f, /*modulation_linears=*/false));
    }
    proj_out = register_module("proj_out", Linear(dim, f.out_channels));
    const int64_t channels = c.approximator_num_channels / 4;
    // Not registered: a non-persistent buffer in the reference, absent from its weight files.
    mod_proj_ = timestep_embedding(at::arange(c.modulation_count(), at::kFloat) * 1000,
                                   2 * channels, /*flip_sin_to_cos=*/true, 0.0);
}

at::Tensor ChromaTransformer2DModelImpl::approximator_input(const at::Tensor& timestep) const {
    const int64_t channels = config_.approximator_num_channels / 4;
    const int64_t batch = timestep.size(0);
    const int64_t rows = mod_proj_.size(0);
    const auto dtype = timestep.scalar_type();
    const at::Tensor t = timestep_embedding(timestep, channels, true, 0.0).to(dtype);
    // The guidance is always 0 (Chroma is not guidance-distilled): its sinusoid is cos 1, sin 0.
    const at::Tensor g =
        timestep_embedding(at::zeros({batch}, timestep.options()), channels, true, 0.0).to(dtype);
    const at::Tensor tg = at::cat({t, g}, 1).unsqueeze(1).expand({batch, rows, 2 * channels});
    const at::Tensor index =
        mod_proj_.to(timestep.device(), dtype).unsqueeze(0).expand({batch, rows, 2 * channels});
    return at::cat({tg, index}, -1);
}

at::Tensor ChromaTransformer2DModelImpl::forward(const ChromaInputs& in) {
    const FluxConfig& f = config_.flux;
    at::Tensor hidden = x_embedder(in.hidden_states);
    const at::Tensor timestep = in.timestep.to(hidden.scalar_type()) * 1000;
    const at::Tensor mods = distilled_guidance_layer(approximator_input(timestep));
    at::Tensor context = context_embedder(in.encoder_hidden_states);
    const FluxRope rope =
        flux_rope(at::cat({in.txt_ids, in.img_ids}, 0), f.axes_dims_rope, f.rope_theta);
    at::Tensor bias;
    if (in.attention_mask.defined()) {
        const at::Tensor m = in.attention_mask.to(hidden.scalar_type());
        bias = (m.unsqueeze(1).unsqueeze(3) * m.unsqueeze(1).unsqueeze(2));  // [B, 1, L, L]
    }
    auto rows = [&](int64_t first, int64_t count) { return mods.narrow(1, first, count); };
    const int64_t image_offset = 3 * f.num_single_layers;
    const int64_t text_offset = image_offset + 6 * f.num_layers;
    for (int64_t i = 0; i < f.num_layers; ++i) {
        auto* b = (*transformer_blocks)[i]->as<FluxTransformerBlockImpl>();
        const at::Tensor image = rows(image_offset + 6 * i, 6);
        const at::Tensor text = rows(text_offset + 6 * i, 6);
        auto run = [b](const std::vector<at::Tensor>& x) {
            auto [c, h] =
                b->forward_modulated(x[0], x[1], x[2].unbind(1), x[3].unbind(1),
                                     FluxRope{x[4], x[5]}, x.size() > 6 ? x[6] : at::Tensor());
            return std::vector<at::Tensor>{h, c};
        };
        std::vector<at::Tensor> inputs = {hidden, context, image, text, rope.cos, rope.sin};
        if (bias.defined()) inputs.push_back(bias);
        const auto out = checkpointing_ ? checkpoint(run, inputs) : run(inputs);
        hidden = out[0];
        context = out[1];
    }
    const int64_t text_tokens = context.size(1);
    at::Tensor joint = at::cat({context, hidden}, 1);
    for (int64_t i = 0; i < f.num_single_layers; ++i) {
        auto* b = (*single_transformer_blocks)[i]->as<FluxSingleTransformerBlockImpl>();
        auto run = [b](const std::vector<at::Tensor>& x) {
            return std::vector<at::Tensor>{b->forward_modulated(
                x[0], x[1].unbind(1), FluxRope{x[2], x[3]}, x.size() > 4 ? x[4] : at::Tensor())};
        };
        std::vector<at::Tensor> inputs = {joint, rows(3 * i, 3), rope.cos, rope.sin};
        if (bias.defined()) inputs.push_back(bias);
        joint = (checkpointing_ ? checkpoint(run, inputs) : run(inputs))[0];
    }
    hidden = joint.narrow(1, text_tokens, joint.size(1) - text_tokens);
    // ChromaAdaLayerNormContinuousPruned: the last two rows, shift then scale.
    const at::Tensor shift = rows(mods.size(1) - 2, 1).squeeze(1).to(hidden.scalar_type());
    const at::Tensor scale = rows(mods.size(1) - 1, 1).squeeze(1).to(hidden.scalar_type());
    const at::Tensor normed = at::layer_norm(hidden, {hidden.size(-1)}, {}, {}, 1e-6);
    return proj_out(at::addcmul(shift.unsqueeze(1), normed, 1 + scale.unsqueeze(1)));
}

ChromaTransformer2DModel load_chroma_transformer(const std::filesystem::path& dir,
                                                 at::ScalarType dtype) {
    return load_component(ChromaTransformer2DModel(read_chroma_config(dir / "config.json")), dir,
                          dtype, "transformer");
}

ChromaConfig read_chroma_config(const std::filesystem::path& path) {
    ChromaConfig c;
    c.flux = read_flux_config(path);
    const ConfigReader r(path);
    c.approximator_num_channels =
        r.integer("approximator_num_channels", c.approximator_num_channels);
    c.approximator_hidden_dim = r.integer("approximator_hidden_dim", c.approximator_hidden_dim);
    c.approximator_layers = r.integer("approximator_layers", c.approximator_layers);
    if (c.approximator_num_channels % 4 != 0) {
        r.fail("approximator_num_channels",
               "must be a multiple of 4 (timestep, guidance and index sinusoids)");
    }
    return c;
}

}  // namespace loom
