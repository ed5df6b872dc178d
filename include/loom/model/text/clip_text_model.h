#pragma once

// ref: transformers models/clip/modeling_clip.py::{CLIPTextModel, CLIPTextModelWithProjection,
// CLIPTextTransformer}. Parameter names equal transformers' state-dict keys
// ("text_model.encoder.layers.0.self_attn.q_proj.weight", "text_projection.weight").

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/normalization.h>

#include <filesystem>
#include <string>

#include "loom/model/nn/adaptable_layers.h"

namespace loom {

struct CLIPTextConfig {
    int64_t vocab_size = 49408;
    int64_t hidden_size = 768;
    int64_t intermediate_size = 3072;
    int64_t num_hidden_layers = 12;
    int64_t num_attention_heads = 12;
    int64_t max_position_embeddings = 77;
    std::string hidden_act = "quick_gelu";  // or "gelu" (SDXL's second encoder)
    double layer_norm_eps = 1e-5;
    int64_t eos_token_id = 2;    // 2 = legacy: pool at the highest token id (transformers' rule)
    int64_t projection_dim = 0;  // > 0: CLIPTextModelWithProjection
};

struct CLIPTextOutput {
    at::Tensor last_hidden_state;         // [B, T, hidden], after the final layer norm
    at::Tensor pooler_output;             // [B, hidden], at the eos position
    at::Tensor penultimate_hidden_state;  // [B, T, hidden], hidden_states[-2], no final norm
    at::Tensor text_embeds;               // [B, projection_dim] (with projection only)
};

class CLIPEncoderLayerImpl : public torch::nn::Module {
  public:
    explicit CLIPEncoderLayerImpl(const CLIPTextConfig& config);
    at::Tensor forward(const at::Tensor& x, const at::Tensor& causal_mask);

  private:
    std::shared_ptr<torch::nn::Module> self_attn;  // q_proj, k_proj, v_proj, out_proj
    Linear q_proj{nullptr};
    Linear k_proj{nullptr};
    Linear v_proj{nullptr};
    Linear out_proj{nullptr};
    torch::nn::LayerNorm layer_norm1{nullptr};
    std::shared_ptr<torch::nn::Module> mlp;  // fc1, fc2
    Linear fc1{nullptr};
    Linear fc2{nullptr};
    torch::nn::LayerNorm layer_norm2{nullptr};
    int64_t heads_;
    bool quick_gelu_;
};
TORCH_MODULE(CLIPEncoderLayer);

class CLIPTextModelImpl : public torch::nn::Module {
  public:
    explicit CLIPTextModelImpl(const CLIPTextConfig& config);
    // input_ids: [B, T] int64
    CLIPTextOutput forward(const at::Tensor& input_ids);
    const CLIPTextConfig& config() const { return config_; }

  private:
    CLIPTextConfig config_;
    std::shared_ptr<torch::nn::Module> text_model;  // embeddings, encoder, final_layer_norm
    torch::nn::Embedding token_embedding{nullptr};
    torch::nn::Embedding position_embedding{nullptr};
    torch::nn::ModuleList layers{nullptr};
    torch::nn::LayerNorm final_layer_norm{nullptr};
    Linear text_projection{nullptr};
};
TORCH_MODULE(CLIPTextModel);

// A CLIPTextModel (with_projection: CLIPTextModelWithProjection) config.json.
CLIPTextConfig read_clip_text_config(const std::filesystem::path& config_json,
                                     bool with_projection);

struct DiffusersFolder;
// A diffusers folder's CLIP text encoder, "text_encoder" (CLIPTextModel) or "text_encoder_2"
// (CLIPTextModelWithProjection), from its config.json with its weights, in eval mode.
CLIPTextModel load_text_encoder(const DiffusersFolder& folder, const std::string& component,
                                at::ScalarType dtype = at::kFloat);

}  // namespace loom
