#include "loom/model/zimage/zimage_transformer.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "../nn/dit_ops.h"
#include "loading/config_reader.h"
#include "loom/model/loading/weight_files.h"
#include "loom/model/nn/checkpoint.h"
#include "loom/model/nn/embeddings.h"

namespace loom {

namespace {

// The reference pads each sequence to a multiple of this (SEQ_MULTI_OF).
constexpr int64_t kSequenceMultiple = 32;

int64_t padded_length(int64_t n) {
    return n + (kSequenceMultiple - n % kSequenceMultiple) % kSequenceMultiple;
}

at::Tensor rms(const at::Tensor& x, const at::Tensor& weight, double eps) {
    return at::rms_norm(x, {x.size(-1)}, weight, eps);
}

// A [B, S] validity mask as a key bias [B, 1, 1, S]; undefined when every key of every item is
// valid (the reference passes no mask then).
at::Tensor key_bias(const at::Tensor& valid) {
    if (valid.all().item<bool>()) return {};
    return dit::key_padding_bias(valid);
}

}  // namespace

ZImageTransformerBlockImpl::ZImageTransformerBlockImpl(const ZImageConfig& c, bool modulation)
    : heads_(c.n_heads), eps_(c.norm_eps), modulation_(modulation) {
    const int64_t dim = c.dim;
    auto attention = register_module("attention", std::make_shared<torch::nn::Module>());
    to_q = attention->register_module("to_q", Linear(dim, dim, false));
    to_k = attention->register_module("to_k", Linear(dim, dim, false));
    to_v = attention->register_module("to_v", Linear(dim, dim, false));
    if (c.qk_norm) {
        norm_q_ = attention->register_module("norm_q", std::make_shared<torch::nn::Module>())
                      ->register_parameter("weight", at::ones({c.head_dim()}));
        norm_k_ = attention->register_module("norm_k", std::make_shared<torch::nn::Module>())
                      ->register_parameter("weight", at::ones({c.head_dim()}));
    }
    auto out = attention->register_module("to_out", torch::nn::ModuleList());
    to_out = Linear(dim, dim, false);
    out->push_back(to_out);
    // FeedForward(dim, int(dim / 3 * 8)): w2(silu(w1 x) * w3 x).
    const auto hidden = static_cast<int64_t>(static_cast<double>(dim) / 3 * 8);
    auto ff = register_module("feed_forward", std::make_shared<torch::nn::Module>());
    w1 = ff->register_module("w1", Linear(dim, hidden, false));
    w2 = ff->register_module("w2", Linear(hidden, dim, false));
    w3 = ff->register_module("w3", Linear(dim, hidden, false));
    const auto norm = [&](const char* name) {
        return register_module(name, std::make_shared<torch::nn::Module>())
            ->register_parameter("weight", at::ones({dim}));
    };
    attention_norm1_ = norm("attention_norm1");
    ffn_norm1_ = norm("ffn_norm1");
    attention_norm2_ = norm("attention_norm2");
    ffn_norm2_ = norm("ffn_norm2");
    if (modulation) {
        // nn.Sequential(Linear(adaln_dim, 4 dim)): no activation before it.
        auto seq = register_module("adaLN_modulation", torch::nn::ModuleList());
        adaln_modulation = Linear(c.adaln_dim(), 4 * dim);
        seq->push_back(adaln_modulation);
    }
}

at::Tensor ZImageTransformerBlockImpl::attention(const at::Tensor& x, const at::Tensor& cos,
                                                 const at::Tensor& sin, const at::Tensor& bias) {
    const auto heads = [&](const at::Tensor& t) { return t.unflatten(-1, {heads_, -1}); };
    at::Tensor q = heads(to_q(x));
    at::Tensor k = heads(to_k(x));
    const at::Tensor v = heads(to_v(x));
    // Attention(qk_norm="rms_norm", eps=1e-5), whatever norm_eps says.
    if (norm_q_.defined()) q = rms(q, norm_q_, 1e-5);
    if (norm_k_.defined()) k = rms(k, norm_k_, 1e-5);
    q = dit::apply_rotary(q, cos, sin);
    k = dit::apply_rotary(k, cos, sin);
    return to_out(dit::attend(q, k, v, bias));
}

at::Tensor ZImageTransformerBlockImpl::feed_forward(const at::Tensor& x) {
    return w2(at::silu(w1(x)) * w3(x));
}

at::Tensor ZImageTransformerBlockImpl::forward(const at::Tensor& x, const at::Tensor& cos,
                                               const at::Tensor& sin, const at::Tensor& bias,
                                               const at::Tensor& adaln) {
    if (!modulation_) {
        const at::Tensor h = x + rms(attention(rms(x, attention_norm1_, eps_), cos, sin, bias),
                                     attention_norm2_, eps_);
        return h + rms(feed_forward(rms(h, ffn_norm1_, eps_)), ffn_norm2_, eps_);
    }
    const auto mod = adaln_modulation(adaln).unsqueeze(1).chunk(4, 2);
    const at::Tensor scale_msa = 1.0 + mod[0];
    const at::Tensor gate_msa = mod[1].tanh();
    const at::Tensor scale_mlp = 1.0 + mod[2];
    const at::Tensor gate_mlp = mod[3].tanh();
    const at::Tensor attended =
        attention(rms(x, attention_norm1_, eps_) * scale_msa, cos, sin, bias);
    const at::Tensor h = x + gate_msa * rms(attended, attention_norm2_, eps_);
    return h + gate_mlp * rms(feed_forward(rms(h, ffn_norm1_, eps_) * scale_mlp), ffn_norm2_, eps_);
}

ZImageTransformer2DModelImpl::ZImageTransformer2DModelImpl(const ZImageConfig& c) : config_(c) {
    const int64_t dim = c.dim;
    const std::string patch = std::to_string(c.patch_size) + "-" + std::to_string(c.f_patch_size);
    auto x_embedders = register_module("all_x_embedder", std::make_shared<torch::nn::Module>());
    x_embedder = x_embedders->register_module(patch, Linear(c.patch_features(), dim));
    auto finals = register_module("all_final_layer", std::make_shared<torch::nn::Module>());
    auto final_layer = finals->register_module(patch, std::make_shared<torch::nn::Module>());
    final_linear = final_layer->register_module(
        "linear", Linear(dim, c.patch_size * c.patch_size * c.f_patch_size * c.in_channels));
    // adaLN_modulation = Sequential(SiLU, Linear): the Linear is entry 1.
    auto final_adaln_seq =
        final_layer->register_module("adaLN_modulation", torch::nn::ModuleList());
    final_adaln_seq->push_back(std::make_shared<torch::nn::Module>());  // 0: SiLU
    final_adaln = Linear(c.adaln_dim(), dim);
    final_adaln_seq->push_back(final_adaln);

    noise_refiner = register_module("noise_refiner", torch::nn::ModuleList());
    context_refiner = register_module("context_refiner", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.n_refiner_layers; ++i) {
        noise_refiner->push_back(ZImageTransformerBlock(c, /*modulation=*/true));
        context_refiner->push_back(ZImageTransformerBlock(c, /*modulation=*/false));
    }
    // TimestepEmbedder(adaln_dim, mid_size=1024): mlp = Sequential(Linear, SiLU, Linear).
    auto t_embedder = register_module("t_embedder", std::make_shared<torch::nn::Module>());
    auto mlp = t_embedder->register_module("mlp", torch::nn::ModuleList());
    t_linear_1 = Linear(256, 1024);
    t_linear_2 = Linear(1024, c.adaln_dim());
    mlp->push_back(t_linear_1);
    mlp->push_back(std::make_shared<torch::nn::Module>());  // 1: SiLU
    mlp->push_back(t_linear_2);
    // cap_embedder = Sequential(RMSNorm(cap_feat_dim), Linear(cap_feat_dim, dim)).
    auto cap = register_module("cap_embedder", torch::nn::ModuleList());
    auto cap_norm = std::make_shared<torch::nn::Module>();
    cap_norm_ = cap_norm->register_parameter("weight", at::ones({c.cap_feat_dim}));
    cap->push_back(cap_norm);
    cap_linear = Linear(c.cap_feat_dim, dim);
    cap->push_back(cap_linear);
    x_pad_token_ = register_parameter("x_pad_token", at::zeros({1, dim}));
    cap_pad_token_ = register_parameter("cap_pad_token", at::zeros({1, dim}));
    layers = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.n_layers; ++i) layers->push_back(ZImageTransformerBlock(c, true));
}

at::Tensor ZImageTransformer2DModelImpl::run_blocks(torch::nn::ModuleList& list, at::Tensor x,
                                                    const at::Tensor& cos, const at::Tensor& sin,
                                                    const at::Tensor& bias,
                                                    const at::Tensor& adaln) {
    for (const auto& module : *list) {
        auto* block = module->as<ZImageTransformerBlockImpl>();
        // The bias and the timestep go in by value: a checkpoint recomputes after this returns.
        auto run = [block, bias](const std::vector<at::Tensor>& in) {
            return std::vector<at::Tensor>{
                block->forward(in[0], in[1], in[2], bias, in.size() > 3 ? in[3] : at::Tensor())};
        };
        std::vector<at::Tensor> inputs = {x, cos, sin};
        if (adaln.defined()) inputs.push_back(adaln);
        x = (checkpointing_ && at::GradMode::is_enabled() ? checkpoint(run, inputs)
                                                          : run(inputs))[0];
    }
    return x;
}

at::Tensor ZImageTransformer2DModelImpl::forward(const ZImageInputs& in) {
    const ZImageConfig& c = config_;
    const int64_t batch = in.latents.size(0);
    const int64_t height = in.latents.size(2);
    const int64_t width = in.latents.size(3);
    const int64_t p = c.patch_size;
    const int64_t rows = height / p;
    const int64_t cols = width / p;
    const int64_t image = rows * cols;
    const int64_t image_padded = padded_length(image);
    TORCH_CHECK(height % p == 0 && width % p == 0,
                "Z-Image transformer: latent sides must be multiples of the patch size");
    TORCH_CHECK(static_cast<int64_t>(in.caption_lengths.size()) == batch,
                "Z-Image transformer: one caption length per item");
    const auto device = in.latents.device();
    const auto on_device = at::TensorOptions().device(device);
    const at::ScalarType dtype = x_embedder->weight.scalar_type();

    // adaln_input: TimestepEmbedder(t x t_scale), cast to the latents' dtype.
    const at::Tensor adaln =
        t_linear_2(at::silu(t_linear_1(
                       timestep_embedding(in.timestep.to(at::kFloat) * c.t_scale, 256, true, 0.0)
                           .to(dtype))))
            .to(in.latents.scalar_type());

    // Each item's caption, padded to a multiple of 32, then to the batch's longest.
    std::vector<int64_t> caption_padded(static_cast<std::size_t>(batch));
    int64_t caption_max = 0;
    for (int64_t b = 0; b < batch; ++b) {
        const int64_t length = in.caption_lengths[static_cast<std::size_t>(b)];
        TORCH_CHECK(length >= 1 && length <= in.captions.size(1),
                    "Z-Image transformer: a caption length outside [1, tokens]");
        caption_padded[static_cast<std::size_t>(b)] = padded_length(length);
        caption_max = std::max(caption_max, caption_padded[static_cast<std::size_t>(b)]);
    }
    const at::Tensor lengths = at::tensor(in.caption_lengths, at::kLong).to(device);
    const at::Tensor padded = at::tensor(caption_padded, at::kLong).to(device);

    // Rotary positions, [B, S, 3] per sequence, and the tables of each axis.
    const at::Tensor caption_index = at::arange(caption_max, on_device.dtype(at::kLong));
    const at::Tensor zeros_c = at::zeros({batch, caption_max}, on_device.dtype(at::kLong));
    const at::Tensor caption_pos = at::stack(
        {(caption_index + 1).unsqueeze(0).expand({batch, caption_max}), zeros_c, zeros_c}, -1);
    const at::Tensor patch_index = at::arange(image_padded, on_device.dtype(at::kLong));
    const at::Tensor real_patch = patch_index < image;
    const at::Tensor image_pos =
        at::stack({(padded + 1).unsqueeze(1).expand({batch, image_padded}),
                   patch_index.div(cols, "floor").unsqueeze(0).expand({batch, image_padded}),
                   (patch_index % cols).unsqueeze(0).expand({batch, image_padded})},
                  -1) *
        real_patch.view({1, image_padded, 1});
    const auto tables = [&](const at::Tensor& pos) {
        std::vector<at::Tensor> cos, sin;
        for (std::size_t axis = 0; axis < c.axes_dims.size(); ++axis) {
            const at::Tensor positions = pos.select(-1, static_cast<int64_t>(axis)).flatten();
            auto [co, si] = dit::rotary_tables(positions, c.axes_dims[axis], c.rope_theta,
                                               dit::AnglePrecision::kFloat32);
            cos.push_back(co.view({batch, -1, c.axes_dims[axis]}));
            sin.push_back(si.view({batch, -1, c.axes_dims[axis]}));
        }
        return std::pair<at::Tensor, at::Tensor>{at::cat(cos, -1), at::cat(sin, -1)};
    };
    const auto [image_cos, image_sin] = tables(image_pos);
    const auto [caption_cos, caption_sin] = tables(caption_pos);

    // Image: 2x2 patches ("c (h ph) (w pw) -> (h w) (ph pw c)"), embedded, pad token after the
    // real patches, refined under the timestep.
    at::Tensor x = in.latents.view({batch, c.in_channels, rows, p, cols, p})
                       .permute({0, 2, 4, 3, 5, 1})
                       .reshape({batch, image, p * p * c.in_channels});
    x = x_embedder(x.to(dtype));
    if (image_padded > image) {
        x = at::cat({x, x_pad_token_.to(x.scalar_type())
                            .unsqueeze(0)
                            .expand({batch, image_padded - image, c.dim})},
                    1);
    }
    x = run_blocks(noise_refiner, x, image_cos, image_sin, at::Tensor(), adaln);

    // Caption: embedded, pad token after the real tokens, refined without the timestep; the
    // rows past an item's padded length are masked out.
    at::Tensor captions = in.captions;
    if (captions.size(1) < caption_max) {
        captions =
            at::cat({captions,
                     captions.new_zeros({batch, caption_max - captions.size(1), captions.size(2)})},
                    1);
    }
    at::Tensor cap =
        cap_linear(rms(captions.narrow(1, 0, caption_max).to(dtype), cap_norm_, c.norm_eps));
    const at::Tensor real_token = caption_index.unsqueeze(0) < lengths.unsqueeze(1);  // [B, Tc]
    cap = at::where(real_token.unsqueeze(-1), cap, cap_pad_token_.to(cap.scalar_type()));
    const at::Tensor caption_valid = caption_index.unsqueeze(0) < padded.unsqueeze(1);
    cap = run_blocks(context_refiner, cap, caption_cos, caption_sin, key_bias(caption_valid),
                     at::Tensor());

    // One sequence per item: its image tokens, then its padded caption; the batch's shorter
    // items masked at the end.
    const at::Tensor unified = at::cat({x, cap}, 1);
    const at::Tensor unified_cos = at::cat({image_cos, caption_cos}, 1);
    const at::Tensor unified_sin = at::cat({image_sin, caption_sin}, 1);
    const at::Tensor valid =
        at::cat({at::ones({batch, image_padded}, on_device.dtype(at::kBool)), caption_valid}, 1);
    at::Tensor h = run_blocks(layers, unified, unified_cos, unified_sin, key_bias(valid), adaln);

    // FinalLayer: LayerNorm without affine, x (1 + Linear(SiLU(adaln))), Linear.
    const at::Tensor scale = 1.0 + final_adaln(at::silu(adaln)).unsqueeze(1);
    at::Tensor out =
        final_linear(at::layer_norm(h.narrow(1, 0, image), {c.dim}, {}, {}, 1e-6) * scale);
    // "(h w) (ph pw c) -> c (h ph) (w pw)"
    return out.view({batch, rows, cols, p, p, c.in_channels})
        .permute({0, 5, 1, 3, 2, 4})
        .reshape({batch, c.in_channels, height, width});
}

ZImageConfig read_zimage_config(const std::filesystem::path& path) {
    const ConfigReader r(path);
    ZImageConfig c;
    const auto single = [&](const char* key, int64_t fallback) {
        const std::vector<int64_t> v =
            r.list<int64_t>(key, {fallback}, "a list of integers",
                            [](const nlohmann::json& e) { return e.is_number_integer(); });
        if (v.size() != 1) {
            r.fail(key, "lists " + std::to_string(v.size()) +
                            " patch sizes; loom builds Z-Image with one");
        }
        return v.front();
    };
    c.patch_size = single("all_patch_size", c.patch_size);
    c.f_patch_size = single("all_f_patch_size", c.f_patch_size);
    if (c.f_patch_size != 1) r.fail("all_f_patch_size", "must be [1] (images have one frame)");
    c.in_channels = r.integer("in_channels", c.in_channels);
    c.dim = r.integer("dim", c.dim);
    c.n_layers = r.integer("n_layers", c.n_layers);
    c.n_refiner_layers = r.integer("n_refiner_layers", c.n_refiner_layers);
    c.n_heads = r.integer("n_heads", c.n_heads);
    c.norm_eps = r.number("norm_eps", c.norm_eps);
    c.qk_norm = r.boolean("qk_norm", c.qk_norm);
    c.cap_feat_dim = r.integer("cap_feat_dim", c.cap_feat_dim);
    c.rope_theta = r.number("rope_theta", c.rope_theta);
    c.t_scale = r.number("t_scale", c.t_scale);
    const auto ints = [](const nlohmann::json& e) { return e.is_number_integer(); };
    c.axes_dims = r.list<int64_t>("axes_dims", c.axes_dims, "a list of 3 integers", ints);
    c.axes_lens = r.list<int64_t>("axes_lens", c.axes_lens, "a list of 3 integers", ints);
    r.require_null("siglip_feat_dim");
    if (c.n_heads <= 0 || c.dim % c.n_heads != 0) {
        r.fail("n_heads", "must divide dim (" + std::to_string(c.dim) + ")");
    }
    int64_t rope = 0;
    for (int64_t d : c.axes_dims) rope += d;
    if (c.axes_dims.size() != 3 || rope != c.head_dim()) {
        r.fail("axes_dims", "must be 3 even sizes summing to dim / n_heads (" +
                                std::to_string(c.head_dim()) + ")");
    }
    return c;
}

ZImageTransformer2DModel load_zimage_transformer(const std::filesystem::path& dir,
                                                 at::ScalarType dtype) {
    return load_component(ZImageTransformer2DModel(read_zimage_config(dir / "config.json")), dir,
                          dtype, "transformer");
}

}  // namespace loom
