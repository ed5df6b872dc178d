#include "loom/model/text/decoder_lm.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <numeric>
#include <tuple>

#include "loading/config_reader.h"
#include "loom/core/error.h"
#include "loom/io/safetensors.h"
#include "loom/model/loading/weight_files.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

// [B, 1, T, T]: 0 where query i may see key j (j <= i and j is not padding), the lowest float
// elsewhere. A query's own position is always allowed, so that a padding query (left padding)
// has a key and its row stays finite; the reference's rows for those queries are never used.
at::Tensor causal_bias(const at::Tensor& attention_mask, int64_t batch, int64_t tokens,
                       const at::TensorOptions& options) {
    const auto bools = options.dtype(at::kBool);
    at::Tensor allowed = at::ones({tokens, tokens}, bools).tril().view({1, 1, tokens, tokens});
    if (attention_mask.defined()) {
        const at::Tensor keys = attention_mask.to(bools.device()).to(at::kBool);
        allowed = allowed & keys.view({batch, 1, 1, tokens});
        allowed = allowed | at::eye(tokens, bools).view({1, 1, tokens, tokens});
    }
    allowed = allowed.expand({batch, 1, tokens, tokens});
    return at::zeros({batch, 1, tokens, tokens}, options)
        .masked_fill(allowed.logical_not(), std::numeric_limits<float>::lowest());
}

}  // namespace

at::Tensor rotate_half(const at::Tensor& x) {
    const int64_t half = x.size(-1) / 2;
    return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

DecoderLayerImpl::DecoderLayerImpl(const DecoderLMConfig& c) : config_(c) {
    const int64_t q_dim = c.num_heads * c.head_dim;
    const int64_t kv_dim = c.num_kv_heads * c.head_dim;
    auto attention = register_module("self_attn", std::make_shared<torch::nn::Module>());
    q_proj = attention->register_module("q_proj", Linear(c.hidden_size, q_dim, c.attention_bias));
    k_proj = attention->register_module("k_proj", Linear(c.hidden_size, kv_dim, c.attention_bias));
    v_proj = attention->register_module("v_proj", Linear(c.hidden_size, kv_dim, c.attention_bias));
    o_proj = attention->register_module("o_proj", Linear(q_dim, c.hidden_size, false));
    if (c.qk_norm) {
        q_norm = attention->register_module("q_norm", T5LayerNorm(c.head_dim, c.rms_norm_eps));
        k_norm = attention->register_module("k_norm", T5LayerNorm(c.head_dim, c.rms_norm_eps));
    }
    auto mlp = register_module("mlp", std::make_shared<torch::nn::Module>());
    gate_proj =
        mlp->register_module("gate_proj", Linear(c.hidden_size, c.intermediate_size, false));
    up_proj = mlp->register_module("up_proj", Linear(c.hidden_size, c.intermediate_size, false));
    down_proj =
        mlp->register_module("down_proj", Linear(c.intermediate_size, c.hidden_size, false));
    input_layernorm =
        register_module("input_layernorm", T5LayerNorm(c.hidden_size, c.rms_norm_eps));
    post_attention_layernorm =
        register_module("post_attention_layernorm", T5LayerNorm(c.hidden_size, c.rms_norm_eps));
}

at::Tensor DecoderLayerImpl::forward(const at::Tensor& x, const at::Tensor& bias,
                                     const at::Tensor& cos, const at::Tensor& sin) {
    const int64_t batch = x.size(0);
    const int64_t tokens = x.size(1);
    const at::Tensor h = input_layernorm(x);
    // [B, T, heads * d] -> [B, heads, T, d]
    auto heads = [&](const at::Tensor& t, int64_t n) {
        return t.view({batch, tokens, n, config_.head_dim});
    };
    at::Tensor q = heads(q_proj(h), config_.num_heads);
    at::Tensor k = heads(k_proj(h), config_.num_kv_heads);
    const at::Tensor v = heads(v_proj(h), config_.num_kv_heads).transpose(1, 2);
    if (config_.qk_norm) {  // Qwen3: over each head, before the rotation
        q = q_norm(q);
        k = k_norm(k);
    }
    q = q.transpose(1, 2);
    k = k.transpose(1, 2);
    const at::Tensor c = cos.unsqueeze(1);
    const at::Tensor s = sin.unsqueeze(1);
    q = q * c + rotate_half(q) * s;
    k = k * c + rotate_half(k) * s;
    // Grouped-query attention: each key/value head serves num_heads / num_kv_heads query heads
    // (transformers' repeat_kv).
    const int64_t groups = config_.num_heads / config_.num_kv_heads;
    const at::Tensor keys = groups == 1 ? k : k.repeat_interleave(groups, 1);
    const at::Tensor values = groups == 1 ? v : v.repeat_interleave(groups, 1);
    at::Tensor attn = at::scaled_dot_product_attention(q, keys, values, bias.to(q.dtype()));
    attn = attn.transpose(1, 2).reshape({batch, tokens, config_.num_heads * config_.head_dim});
    const at::Tensor out = x + o_proj(attn);
    const at::Tensor f = post_attention_layernorm(out);
    return out + down_proj(at::silu(gate_proj(f)) * up_proj(f));
}

DecoderLMImpl::DecoderLMImpl(const DecoderLMConfig& c) : config_(c) {
    embed_tokens =
        register_module("embed_tokens", torch::nn::Embedding(c.vocab_size, c.hidden_size));
    layers = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.num_layers; ++i) layers->push_back(DecoderLayer(c));
    norm = register_module("norm", T5LayerNorm(c.hidden_size, c.rms_norm_eps));
}

at::Tensor DecoderLMImpl::embed(const at::Tensor& input_ids) {
    return embed_tokens(input_ids);
}

std::pair<at::Tensor, at::Tensor> decoder_rotary_tables(const DecoderLMConfig& c,
                                                        const at::Tensor& position_ids) {
    const auto floats = at::TensorOptions().dtype(at::kFloat).device(position_ids.device());
    const int64_t half = c.head_dim / 2;
    // inv_freq_i = 1 / theta^(2i / head_dim), in float32 as the reference computes it.
    const at::Tensor exponents = at::arange(0, c.head_dim, 2, floats.dtype(at::kLong))
                                     .to(at::kFloat)
                                     .div(static_cast<double>(c.head_dim));
    const at::Tensor inv_freq =
        at::pow(at::scalar_tensor(c.rope_theta, floats), exponents).reciprocal();
    // [rows, B, T, half]
    at::Tensor freqs = position_ids.to(at::kFloat).unsqueeze(-1) * inv_freq;
    if (!c.mrope_section.empty()) {
        std::vector<at::Tensor> parts;
        int64_t start = 0;
        for (std::size_t i = 0; i < c.mrope_section.size(); ++i) {
            const int64_t row = static_cast<int64_t>(i % 3) % freqs.size(0);
            parts.push_back(freqs[row].narrow(-1, start, c.mrope_section[i]));
            start += c.mrope_section[i];
        }
        freqs = at::cat(parts, -1);
    } else {
        freqs = freqs[0];
    }
    TORCH_CHECK(freqs.size(-1) == half, "rotary frequencies ", freqs.size(-1), " for head_dim ",
                c.head_dim);
    const at::Tensor both = at::cat({freqs, freqs}, -1);
    return {both.cos(), both.sin()};
}

at::Tensor DecoderLMImpl::forward_embeds(const at::Tensor& embeds, const at::Tensor& attention_mask,
                                         const at::Tensor& position_ids, int64_t hidden_state) {
    const int64_t n = config_.num_layers;
    const int64_t index = hidden_state < 0 ? n + 1 + hidden_state : hidden_state;
    if (index < 0 || index > n) {
        throw Error("decoder LM: hidden state " + std::to_string(hidden_state) +
                    " of a model with " + std::to_string(n) + " layers (0.." + std::to_string(n) +
                    " or -1..-" + std::to_string(n + 1) + ")");
    }
    const int64_t batch = embeds.size(0);
    const int64_t tokens = embeds.size(1);
    at::Tensor positions = position_ids;
    if (!positions.defined()) {
        positions = at::arange(tokens, embeds.options().dtype(at::kLong))
                        .view({1, 1, tokens})
                        .expand({1, batch, tokens});
    } else if (positions.dim() == 2) {
        positions = positions.unsqueeze(0);
    }
    auto [cos, sin] = decoder_rotary_tables(config_, positions);
    cos = cos.to(embeds.scalar_type());
    sin = sin.to(embeds.scalar_type());
    const at::Tensor bias =
        causal_bias(attention_mask, batch, tokens, embeds.options().dtype(at::kFloat));
    at::Tensor h = embeds;
    for (int64_t i = 0; i < index; ++i) {
        h = layers[static_cast<std::size_t>(i)]->as<DecoderLayerImpl>()->forward(h, bias, cos, sin);
    }
    return index == n ? norm(h) : h;
}

at::Tensor DecoderLMImpl::forward(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                  int64_t hidden_state) {
    return forward_embeds(embed(input_ids), attention_mask, {}, hidden_state);
}

DecoderLMConfig read_decoder_lm_config(const fs::path& path) {
    const ConfigReader top(path);
    const std::string type = top.text("model_type", "");
    if (type != "qwen2_5_vl" && type != "qwen2" && type != "qwen3") {
        top.fail("model_type",
                 "is '" + type + "'; loom's decoder LM reads qwen2_5_vl, qwen2 and qwen3 configs");
    }
    // transformers 5 writes Qwen2.5-VL's language model under text_config; transformers 4 wrote
    // it at the top level (the Qwen-Image folders on the Hub have both).
    const bool nested = type == "qwen2_5_vl" && top.section("text_config").has("hidden_size");
    const ConfigReader text = nested ? top.section("text_config") : top;
    DecoderLMConfig c;
    c.model_type = type;
    c.vocab_size = text.integer("vocab_size", c.vocab_size);
    c.hidden_size = text.integer("hidden_size", c.hidden_size);
    c.intermediate_size = text.integer("intermediate_size", c.intermediate_size);
    c.num_layers = text.integer("num_hidden_layers", c.num_layers);
    c.num_heads = text.integer("num_attention_heads", c.num_heads);
    c.num_kv_heads = text.integer("num_key_value_heads", c.num_heads);
    c.head_dim = type == "qwen3" ? text.integer("head_dim", c.hidden_size / c.num_heads)
                                 : c.hidden_size / std::max<int64_t>(c.num_heads, 1);
    c.rms_norm_eps = text.number("rms_norm_eps", c.rms_norm_eps);
    c.attention_bias = type == "qwen3" ? text.boolean("attention_bias", false) : true;
    c.qk_norm = type == "qwen3";
    // The rope: transformers 5's rope_parameters, or transformers 4's rope_theta and
    // rope_scaling ({"type": "mrope", "mrope_section": [...]}).
    const ConfigReader parameters = text.section("rope_parameters");
    const ConfigReader scaling = text.section("rope_scaling");
    const ConfigReader& rope = text.has("rope_scaling") ? scaling : parameters;
    c.rope_theta = parameters.number("rope_theta", text.number("rope_theta", c.rope_theta));
    const std::string rope_type =
        rope.text("rope_type", rope.text("type", parameters.text("rope_type", "default")));
    c.mrope_section = rope.list<int64_t>(
        "mrope_section",
        type == "qwen2_5_vl" ? std::vector<int64_t>{16, 24, 24}  // its default
                             : std::vector<int64_t>{},
        "a list of integers", [](const nlohmann::json& e) { return e.is_number_integer(); });
    if (rope_type != "default" && rope_type != "mrope") {
        rope.fail("rope_type", "is '" + rope_type +
                                   "'; loom's decoder LM implements the default rotary "
                                   "embedding and Qwen2.5-VL's mrope");
    }
    const std::string act = text.text("hidden_act", "silu");
    if (act != "silu") text.fail("hidden_act", "is '" + act + "'; loom's decoder LM uses silu");
    if (text.boolean("use_sliding_window", false)) {
        text.fail("use_sliding_window", "is true; loom's decoder LM attends over every token");
    }
    if (c.num_layers < 1 || c.num_heads < 1 || c.num_kv_heads < 1 || c.head_dim < 2 ||
        c.head_dim % 2 != 0 || c.num_heads % c.num_kv_heads != 0) {
        text.fail("num_attention_heads",
                  "and num_key_value_heads, num_hidden_layers, head_dim must be positive, head_dim "
                  "even and the heads a multiple of the key/value heads");
    }
    const int64_t sections =
        std::accumulate(c.mrope_section.begin(), c.mrope_section.end(), int64_t{0});
    if (!c.mrope_section.empty() && sections != c.head_dim / 2) {
        rope.fail("mrope_section", "sums to " + std::to_string(sections) +
                                       ", not head_dim / 2 = " + std::to_string(c.head_dim / 2));
    }
    return c;
}

DecoderLM load_decoder_lm(const fs::path& folder, at::ScalarType dtype) {
    DecoderLM model(read_decoder_lm_config(folder / "config.json"));
    model->to(dtype);
    std::vector<StoredTensor> all = stored_tensors_in(folder);
    // The prefix the language model's keys have in these files.
    std::string prefix;
    bool found = false;
    for (const char* candidate : {"model.language_model.", "language_model.", "model.", ""}) {
        for (const StoredTensor& s : all) {
            if (s.name == std::string(candidate) + "embed_tokens.weight") {
                prefix = candidate;
                found = true;
                break;
            }
        }
        if (found) break;
    }
    if (!found) {
        throw FormatError(folder.string(),
                          "no embed_tokens.weight under model.language_model., language_model., "
                          "model. or at the top level: not a Qwen language model's weights");
    }
    std::vector<StoredTensor> mine;
    for (StoredTensor& s : all) {
        if (s.name.rfind(prefix, 0) != 0) continue;
        const std::string name = s.name.substr(prefix.size());
        // Under "model." (transformers 4's Qwen2.5-VL) the vision tower is "visual.", outside it.
        if (name.rfind("layers.", 0) == 0 || name == "embed_tokens.weight" ||
            name == "norm.weight") {
            s.name = name;
            mine.push_back(std::move(s));
        }
    }
    load_stored_tensors(*model, mine, "text encoder", folder.string(), "config.json");
    model->eval();
    return model;
}

std::pair<at::Tensor, at::Tensor> real_tokens_first(const at::Tensor& states,
                                                    const at::Tensor& mask) {
    // A stable descending sort of the mask lists each row's real positions first, in order.
    const at::Tensor order =
        std::get<1>(mask.sort(/*stable=*/true, /*dim=*/1, /*descending=*/true));
    const at::Tensor kept = mask.gather(1, order);
    const at::Tensor moved = states.gather(1, order.unsqueeze(-1).expand_as(states)) *
                             kept.unsqueeze(-1).to(states.scalar_type());
    return {moved, kept};
}

}  // namespace loom
