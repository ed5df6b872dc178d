#include "loom/model/text/t5_encoder.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "loading/config_reader.h"
#include "loom/core/error.h"
#include "loom/model/loading/diffusers_folder.h"
#include "loom/model/loading/weight_files.h"

namespace loom {

namespace fs = std::filesystem;

T5LayerNormImpl::T5LayerNormImpl(int64_t dim, double eps) : eps_(eps) {
    weight = register_parameter("weight", at::ones({dim}));
}

at::Tensor T5LayerNormImpl::forward(const at::Tensor& x) {
    const at::Tensor variance = x.to(at::kFloat).pow(2).mean(-1, /*keepdim=*/true);
    at::Tensor h = x * at::rsqrt(variance + eps_);
    if (weight.scalar_type() == at::kHalf || weight.scalar_type() == at::kBFloat16) {
        h = h.to(weight.scalar_type());
    }
    return weight * h;
}

at::Tensor t5_relative_position_buckets(int64_t queries, int64_t keys, int64_t num_buckets,
                                        int64_t max_distance, const at::Device& device) {
    const auto longs = at::TensorOptions().dtype(at::kLong).device(device);
    const at::Tensor relative =
        at::arange(keys, longs).unsqueeze(0) - at::arange(queries, longs).unsqueeze(1);
    const int64_t half = num_buckets / 2;
    at::Tensor buckets = (relative > 0).to(at::kLong) * half;
    const at::Tensor distance = relative.abs();
    const int64_t max_exact = half / 2;
    // The reference's float32 arithmetic, so that the bucket edges fall where they fall there.
    at::Tensor large =
        max_exact + (at::log(distance.to(at::kFloat) / static_cast<float>(max_exact)) /
                     static_cast<float>(std::log(static_cast<double>(max_distance) / max_exact)) *
                     static_cast<float>(half - max_exact))
                        .to(at::kLong);
    large = at::minimum(large, at::full_like(large, half - 1));
    return buckets + at::where(distance < max_exact, distance, large);
}

T5BlockImpl::T5BlockImpl(const T5Config& c, bool has_relative_bias) : config_(c) {
    const int64_t inner = c.num_heads * c.d_kv;
    auto layer = register_module("layer", torch::nn::ModuleList());
    auto self_attention_layer = std::make_shared<torch::nn::Module>();
    auto attention = self_attention_layer->register_module("SelfAttention",
                                                           std::make_shared<torch::nn::Module>());
    q = attention->register_module("q", Linear(c.d_model, inner, false));
    k = attention->register_module("k", Linear(c.d_model, inner, false));
    v = attention->register_module("v", Linear(c.d_model, inner, false));
    o = attention->register_module("o", Linear(inner, c.d_model, false));
    if (has_relative_bias) {
        relative_attention_bias = attention->register_module(
            "relative_attention_bias",
            torch::nn::Embedding(c.relative_attention_num_buckets, c.num_heads));
    }
    attention_norm = self_attention_layer->register_module(
        "layer_norm", T5LayerNorm(c.d_model, c.layer_norm_epsilon));
    layer->push_back(self_attention_layer);
    auto ff_layer = std::make_shared<torch::nn::Module>();
    auto dense = ff_layer->register_module("DenseReluDense", std::make_shared<torch::nn::Module>());
    if (c.gated_act) {
        wi_0 = dense->register_module("wi_0", Linear(c.d_model, c.d_ff, false));
        wi_1 = dense->register_module("wi_1", Linear(c.d_model, c.d_ff, false));
    } else {
        wi_0 = dense->register_module("wi", Linear(c.d_model, c.d_ff, false));
    }
    wo = dense->register_module("wo", Linear(c.d_ff, c.d_model, false));
    ff_norm = ff_layer->register_module("layer_norm", T5LayerNorm(c.d_model, c.layer_norm_epsilon));
    layer->push_back(ff_layer);
}

at::Tensor T5BlockImpl::position_bias(int64_t tokens, const at::TensorOptions& options) const {
    TORCH_CHECK(relative_attention_bias, "this T5 block has no relative attention bias");
    const at::Tensor buckets = t5_relative_position_buckets(
        tokens, tokens, config_.relative_attention_num_buckets,
        config_.relative_attention_max_distance, relative_attention_bias->weight.device());
    // [T, T, heads] -> [1, heads, T, T]
    return at::embedding(relative_attention_bias->weight, buckets)
        .permute({2, 0, 1})
        .unsqueeze(0)
        .to(options);
}

at::Tensor T5BlockImpl::forward(const at::Tensor& x, const at::Tensor& bias) {
    const int64_t batch = x.size(0);
    const int64_t tokens = x.size(1);
    const at::Tensor h = attention_norm(x);
    auto split = [&](const at::Tensor& t) {
        return t.view({batch, tokens, config_.num_heads, config_.d_kv}).transpose(1, 2);
    };
    // T5 does not scale the scores; the bias (and mask) is added before the softmax.
    at::Tensor attn = at::scaled_dot_product_attention(split(q(h)), split(k(h)), split(v(h)),
                                                       bias.to(h.dtype()), 0.0, false,
                                                       /*scale=*/1.0);
    attn = attn.transpose(1, 2).reshape({batch, tokens, config_.num_heads * config_.d_kv});
    at::Tensor out = x + o(attn);
    const at::Tensor f = ff_norm(out);
    at::Tensor inner = wi_0(f);
    if (config_.act == "gelu_new") {
        inner = at::gelu(inner, "tanh");
    } else if (config_.act == "gelu") {
        inner = at::gelu(inner);
    } else if (config_.act == "relu") {
        inner = at::relu(inner);
    } else {
        inner = at::silu(inner);
    }
    if (config_.gated_act) inner = inner * wi_1(f);
    return out + wo(inner);
}

T5EncoderModelImpl::T5EncoderModelImpl(const T5Config& c) : config_(c) {
    if (c.act != "gelu_new" && c.act != "gelu" && c.act != "relu" && c.act != "silu") {
        throw Error("T5 config: activation '" + c.act +
                    "' is not supported (gelu_new, gelu, relu or silu)");
    }
    shared = register_module("shared", torch::nn::Embedding(c.vocab_size, c.d_model));
    auto encoder = register_module("encoder", std::make_shared<torch::nn::Module>());
    blocks = encoder->register_module("block", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.num_layers; ++i) {
        blocks->push_back(T5Block(c, c.bias_in_every_layer || i == 0));
    }
    final_layer_norm =
        encoder->register_module("final_layer_norm", T5LayerNorm(c.d_model, c.layer_norm_epsilon));
}

at::Tensor T5EncoderModelImpl::forward(const at::Tensor& input_ids,
                                       const at::Tensor& attention_mask) {
    const int64_t tokens = input_ids.size(1);
    at::Tensor h = shared(input_ids);
    const auto bias_options = h.options().dtype(at::kFloat);
    at::Tensor mask;  // [B, 1, 1, T]: 0 where kept, the lowest float where padded
    if (attention_mask.defined()) {
        mask = (1.0 - attention_mask.to(bias_options)) * std::numeric_limits<float>::lowest();
        mask = mask.view({attention_mask.size(0), 1, 1, tokens});
    }
    at::Tensor bias;
    for (std::size_t i = 0; i < blocks->size(); ++i) {
        auto* block = blocks[i]->as<T5BlockImpl>();
        if (i == 0 || config_.bias_in_every_layer) {
            bias = block->position_bias(tokens, bias_options);
            if (mask.defined()) bias = bias + mask;
        }
        h = block->forward(h, bias);
    }
    return final_layer_norm(h);
}

T5EncoderModel load_t5_encoder(const DiffusersFolder& folder, const std::string& component,
                               at::ScalarType dtype) {
    T5EncoderModel encoder(read_t5_config(folder.dir(component) / "config.json"));
    encoder->to(dtype);
    load_t5_weights(*encoder, find_weight_files(folder.dir(component)), component);
    encoder->eval();
    return encoder;
}

T5Config read_t5_config(const fs::path& path) {
    const ConfigReader r(path);
    const std::string type = r.text("model_type", "t5");
    if (type != "t5" && type != "umt5") {
        r.fail("model_type", "is '" + type + "'; loom's T5 encoder reads t5 or umt5 configs");
    }
    T5Config c;
    c.bias_in_every_layer = type == "umt5";
    c.vocab_size = r.integer("vocab_size", c.vocab_size);
    c.d_model = r.integer("d_model", c.d_model);
    c.d_kv = r.integer("d_kv", c.d_kv);
    c.d_ff = r.integer("d_ff", c.d_ff);
    c.num_layers = r.integer("num_layers", c.num_layers);
    c.num_heads = r.integer("num_heads", c.num_heads);
    c.relative_attention_num_buckets =
        r.integer("relative_attention_num_buckets", c.relative_attention_num_buckets);
    c.relative_attention_max_distance =
        r.integer("relative_attention_max_distance", c.relative_attention_max_distance);
    c.layer_norm_epsilon = r.number("layer_norm_epsilon", c.layer_norm_epsilon);
    // transformers' rule: "gated-gelu" means gated gelu_new; otherwise "[gated-]ACT".
    const std::string proj = r.text("feed_forward_proj", "relu");
    c.gated_act = proj.rfind("gated-", 0) == 0;
    c.act = c.gated_act ? proj.substr(6) : proj;
    if (proj == "gated-gelu") c.act = "gelu_new";
    if (c.act != "gelu_new" && c.act != "gelu" && c.act != "relu" && c.act != "silu") {
        r.fail("feed_forward_proj", "is '" + proj +
                                        "'; loom implements relu, gelu, gelu_new and silu, "
                                        "gated or not");
    }
    if (c.num_layers < 1 || c.num_heads < 1 || c.d_kv < 1 || c.d_model < 1 ||
        c.relative_attention_num_buckets < 4) {
        r.fail("num_layers",
               "and num_heads, d_kv, d_model, relative_attention_num_buckets must "
               "be positive (buckets at least 4)");
    }
    return c;
}

std::size_t load_t5_weights(T5EncoderModelImpl& model, const std::vector<fs::path>& files,
                            const std::string& what) {
    return load_weights(model, files, what, "", {{"encoder.embed_tokens.weight", "shared.weight"}});
}

}  // namespace loom
