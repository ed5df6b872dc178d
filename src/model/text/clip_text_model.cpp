#include "loom/model/text/clip_text_model.h"

#include <ATen/ATen.h>

#include <limits>

#include "loading/config_reader.h"
#include "loom/core/error.h"
#include "loom/model/loading/diffusers_folder.h"
#include "loom/model/loading/weight_files.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

torch::nn::LayerNorm layer_norm(const CLIPTextConfig& c) {
    return torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden_size}).eps(c.layer_norm_eps));
}

}  // namespace

CLIPEncoderLayerImpl::CLIPEncoderLayerImpl(const CLIPTextConfig& c)
    : heads_(c.num_attention_heads), quick_gelu_(c.hidden_act == "quick_gelu") {
    if (c.hidden_act != "quick_gelu" && c.hidden_act != "gelu") {
        throw Error("CLIP text config: hidden_act '" + c.hidden_act +
                    "' is not supported (quick_gelu or gelu)");
    }
    self_attn = register_module("self_attn", std::make_shared<torch::nn::Module>());
    q_proj = self_attn->register_module("q_proj", Linear(c.hidden_size, c.hidden_size));
    k_proj = self_attn->register_module("k_proj", Linear(c.hidden_size, c.hidden_size));
    v_proj = self_attn->register_module("v_proj", Linear(c.hidden_size, c.hidden_size));
    out_proj = self_attn->register_module("out_proj", Linear(c.hidden_size, c.hidden_size));
    layer_norm1 = register_module("layer_norm1", layer_norm(c));
    mlp = register_module("mlp", std::make_shared<torch::nn::Module>());
    fc1 = mlp->register_module("fc1", Linear(c.hidden_size, c.intermediate_size));
    fc2 = mlp->register_module("fc2", Linear(c.intermediate_size, c.hidden_size));
    layer_norm2 = register_module("layer_norm2", layer_norm(c));
}

at::Tensor CLIPEncoderLayerImpl::forward(const at::Tensor& x, const at::Tensor& causal_mask) {
    const int64_t batch = x.size(0);
    const int64_t tokens = x.size(1);
    const int64_t dim = x.size(2);
    const int64_t head_dim = dim / heads_;
    at::Tensor h = layer_norm1(x);
    auto split = [&](const at::Tensor& t) {
        return t.view({batch, tokens, heads_, head_dim}).transpose(1, 2);  // [B, heads, T, d]
    };
    at::Tensor attn = at::scaled_dot_product_attention(split(q_proj(h)), split(k_proj(h)),
                                                       split(v_proj(h)), causal_mask);
    attn = attn.transpose(1, 2).reshape({batch, tokens, dim});
    at::Tensor out = x + out_proj(attn);
    at::Tensor m = fc1(layer_norm2(out));
    m = quick_gelu_ ? m * at::sigmoid(1.702 * m) : at::gelu(m);
    return out + fc2(m);
}

CLIPTextModelImpl::CLIPTextModelImpl(const CLIPTextConfig& c) : config_(c) {
    text_model = register_module("text_model", std::make_shared<torch::nn::Module>());
    auto embeddings =
        text_model->register_module("embeddings", std::make_shared<torch::nn::Module>());
    token_embedding = embeddings->register_module(
        "token_embedding", torch::nn::Embedding(c.vocab_size, c.hidden_size));
    position_embedding = embeddings->register_module(
        "position_embedding", torch::nn::Embedding(c.max_position_embeddings, c.hidden_size));
    auto encoder = text_model->register_module("encoder", std::make_shared<torch::nn::Module>());
    layers = encoder->register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(CLIPEncoderLayer(c));
    final_layer_norm = text_model->register_module("final_layer_norm", layer_norm(c));
    if (c.projection_dim > 0) {
        text_projection =
            register_module("text_projection", Linear(c.hidden_size, c.projection_dim, false));
    }
}

CLIPTextOutput CLIPTextModelImpl::forward(const at::Tensor& input_ids) {
    const int64_t tokens = input_ids.size(1);
    TORCH_CHECK(tokens <= config_.max_position_embeddings, "CLIP input has ", tokens,
                " tokens, more than max_position_embeddings ", config_.max_position_embeddings);
    const at::Tensor positions = at::arange(tokens, input_ids.options().dtype(at::kLong));
    at::Tensor h = token_embedding(input_ids) + position_embedding(positions).unsqueeze(0);
    // Additive causal mask: position i sees positions <= i.
    const at::Tensor mask =
        at::full({tokens, tokens}, -std::numeric_limits<float>::infinity(), h.options()).triu(1);
    CLIPTextOutput out;
    for (std::size_t i = 0; i < layers->size(); ++i) {
        if (i + 1 == layers->size()) out.penultimate_hidden_state = h;
        h = layers[i]->as<CLIPEncoderLayerImpl>()->forward(h, mask.to(h.dtype()));
    }
    if (layers->size() == 0) out.penultimate_hidden_state = h;
    out.last_hidden_state = final_layer_norm(h);
    const at::Tensor rows = at::arange(input_ids.size(0), input_ids.options().dtype(at::kLong));
    const at::Tensor eos_index = config_.eos_token_id == 2
                                     ? input_ids.to(at::kInt).argmax(-1)
                                     : (input_ids == config_.eos_token_id).to(at::kInt).argmax(-1);
    out.pooler_output = out.last_hidden_state.index({rows, eos_index});
    if (text_projection) out.text_embeds = text_projection(out.pooler_output);
    return out;
}

CLIPTextConfig read_clip_text_config(const fs::path& path, bool with_projection) {
    const ConfigReader r(path);
    CLIPTextConfig c;
    c.vocab_size = r.integer("vocab_size", 49408);
    c.hidden_size = r.integer("hidden_size", 512);
    c.intermediate_size = r.integer("intermediate_size", 2048);
    c.num_hidden_layers = r.integer("num_hidden_layers", 12);
    c.num_attention_heads = r.integer("num_attention_heads", 8);
    c.max_position_embeddings = r.integer("max_position_embeddings", 77);
    c.hidden_act = r.text("hidden_act", "quick_gelu");
    c.layer_norm_eps = r.number("layer_norm_eps", 1e-5);
    c.eos_token_id = r.integer("eos_token_id", 2);
    if (with_projection) c.projection_dim = r.integer("projection_dim", 512);
    return c;
}

CLIPTextModel load_text_encoder(const DiffusersFolder& folder, const std::string& component,
                                at::ScalarType dtype) {
    CLIPTextModel encoder(read_clip_text_config(folder.dir(component) / "config.json",
                                                component == "text_encoder_2"));
    encoder->to(dtype);
    load_weights(*encoder, find_weight_files(folder.dir(component)), component, "text_model.");
    encoder->eval();
    return encoder;
}

}  // namespace loom
