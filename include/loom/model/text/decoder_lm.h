#pragma once

// A decoder-only language model used as a text encoder: the Qwen family's transformer stack
// (token embedding, pre-norm layers of grouped-query causal self-attention with a rotary position
// embedding and a SwiGLU MLP, RMS norms, a final norm), without its language-modelling head.
// One implementation for the encoders the 2026 families use:
//   - Qwen2.5-VL's language model (Qwen-Image, Qwen-Image-Edit): q/k/v biases and the
//     multimodal rotary embedding (mrope_section), whose three position rows (time, height,
//     width) are equal for text and differ for an image's tokens;
//   - Qwen3 (Z-Image): no biases, an RMS norm over each head of the queries and keys before the
//     rotation, a head size of its own, one position row.
// Parameter names equal transformers' text-model keys ("layers.0.self_attn.q_proj.weight",
// "embed_tokens.weight", "norm.weight"); load_decoder_lm finds them under any of the prefixes
// transformers 4 and 5 save them with.
//
// ref: transformers models/qwen2_5_vl/modeling_qwen2_5_vl.py::{Qwen2_5_VLTextModel,
//      Qwen2_5_VLDecoderLayer, Qwen2_5_VLAttention, Qwen2_5_VLRotaryEmbedding, Qwen2MLP};
//      models/qwen3/modeling_qwen3.py::{Qwen3Model, Qwen3Attention}
//
// As in the reference: the RMS norms compute in float32 and return the input's dtype times the
// weight (the computation of T5's layer norm, which this reuses); the rotary embedding turns the
// two halves of each head (rotate_half), its tables computed in float32 and cast to the
// activations' dtype; attention is causal, with padding keys masked.

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "loom/model/nn/adaptable_layers.h"
#include "loom/model/text/t5_encoder.h"

namespace loom {

struct DecoderLMConfig {
    std::string model_type = "qwen2_5_vl";  // qwen2_5_vl (its text_config), qwen2 or qwen3
    int64_t vocab_size = 152064;
    int64_t hidden_size = 3584;
    int64_t intermediate_size = 18944;
    int64_t num_layers = 28;
    int64_t num_heads = 28;
    int64_t num_kv_heads = 4;
    int64_t head_dim = 128;
    double rms_norm_eps = 1e-6;
    double rope_theta = 1000000.0;
    bool attention_bias = true;  // q/k/v biases (Qwen2, Qwen2.5-VL); o_proj never has one
    bool qk_norm = false;        // Qwen3's q_norm / k_norm over head_dim
    // Qwen2.5-VL's [16, 24, 24]: which share of the head_dim/2 frequencies turns by the time,
    // height and width position rows. Empty: one position row.
    std::vector<int64_t> mrope_section;
};

class DecoderLayerImpl : public torch::nn::Module {
  public:
    explicit DecoderLayerImpl(const DecoderLMConfig& config);
    // x: [B, T, hidden]; bias: [B, 1, T, T] added to the scores (causal and padding);
    // cos, sin: [B, T, head_dim] in x's dtype.
    at::Tensor forward(const at::Tensor& x, const at::Tensor& bias, const at::Tensor& cos,
                       const at::Tensor& sin);

  private:
    DecoderLMConfig config_;
    T5LayerNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
    Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
    T5LayerNorm q_norm{nullptr}, k_norm{nullptr};
    Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(DecoderLayer);

class DecoderLMImpl : public torch::nn::Module {
  public:
    explicit DecoderLMImpl(const DecoderLMConfig& config);

    at::Tensor embed(const at::Tensor& input_ids);
    // transformers' hidden_states[hidden_state] of the text model: 0 the embeddings, i the
    // output of layer i, num_layers the final norm's output; negative counts from the end as in
    // Python (-1 the final norm's output as Qwen-Image takes it, -2 the last layer's input as
    // Z-Image takes it). Layers past the one asked for are not run.
    // embeds: [B, T, hidden]; attention_mask: [B, T] (1 keep, 0 padding) or undefined;
    // position_ids: [rows, B, T] or [B, T] int64, or undefined for 0..T-1 (what transformers 5
    // uses for text alone).
    at::Tensor forward_embeds(const at::Tensor& embeds, const at::Tensor& attention_mask = {},
                              const at::Tensor& position_ids = {}, int64_t hidden_state = -1);
    at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& attention_mask = {},
                       int64_t hidden_state = -1);

    const DecoderLMConfig& config() const { return config_; }

  private:
    DecoderLMConfig config_;
    torch::nn::Embedding embed_tokens{nullptr};
    torch::nn::ModuleList layers{nullptr};
    T5LayerNorm norm{nullptr};
};
TORCH_MODULE(DecoderLM);

// The pipelines' hidden_states[i][attention_mask[i]]: `states` [B, T, hidden] with each row's
// real tokens (mask [B, T] 1) moved first, in order, and zeros after; and the mask the same way
// (ones first). Whatever the tokenizer's padding side.
std::pair<at::Tensor, at::Tensor> real_tokens_first(const at::Tensor& states,
                                                    const at::Tensor& mask);

// transformers' rotate_half: (x1, x2) -> (-x2, x1) over the two halves of the last dimension
// (the rotation of the decoder LM's and Qwen2.5-VL's vision tower's rotary embeddings).
at::Tensor rotate_half(const at::Tensor& x);

// The rotary tables for positions [rows, B, T]: cos and sin [B, T, head_dim] float32, each
// frequency taken from its mrope row (row 0 for all without sections), both halves equal.
std::pair<at::Tensor, at::Tensor> decoder_rotary_tables(const DecoderLMConfig& config,
                                                        const at::Tensor& position_ids);

// A config.json of a Qwen2.5-VL model (its text_config, or the top level as transformers 4
// writes it), a Qwen2 or a Qwen3 model. Unsupported options (sliding-window layers, another rope
// type, another activation) are errors naming the key.
DecoderLMConfig read_decoder_lm_config(const std::filesystem::path& config_json);

// The language model of a transformers folder (Qwen2_5_VLForConditionalGeneration,
// Qwen3ForCausalLM, Qwen3Model, ...): its config.json and the weights under whichever prefix the
// files use ("model.language_model.", "model.", "language_model." or none); the vision tower and
// the language-modelling head in the same files are left out. In `dtype`, in eval mode.
DecoderLM load_decoder_lm(const std::filesystem::path& folder, at::ScalarType dtype = at::kFloat);

}  // namespace loom
