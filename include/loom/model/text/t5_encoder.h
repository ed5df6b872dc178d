#pragma once

// The T5 encoder stack: transformers' T5EncoderModel (Flux's text_encoder_2, T5 v1.1 with
// gated-GELU) and UMT5EncoderModel (Wan's text encoder: the same with a relative position bias in
// every layer instead of only the first). Parameter names equal transformers' state-dict keys
// ("encoder.block.0.layer.0.SelfAttention.q.weight", "shared.weight").
//
// ref: transformers models/t5/modeling_t5.py::{T5EncoderModel, T5Attention, T5LayerNorm,
//      T5DenseGatedActDense}; models/umt5/modeling_umt5.py::UMT5EncoderModel
//
// As in the reference: attention scores are not scaled by 1/sqrt(d); the position bias uses
// bidirectional log-spaced buckets; layer norms are RMS norms without a bias or a mean, computed
// in float32. transformers' float16 clamp of infinities is not done: run T5 in float32 or
// bfloat16 (float16 overflows in T5 v1.1 — the reason the reference clamps).

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "loom/model/nn/adaptable_layers.h"

namespace loom {

struct T5Config {
    int64_t vocab_size = 32128;
    int64_t d_model = 4096;
    int64_t d_kv = 64;
    int64_t d_ff = 10240;
    int64_t num_layers = 24;
    int64_t num_heads = 64;
    int64_t relative_attention_num_buckets = 32;
    int64_t relative_attention_max_distance = 128;
    double layer_norm_epsilon = 1e-6;
    bool gated_act = true;             // feed_forward_proj "gated-*": wi_0, wi_1; else wi
    std::string act = "gelu_new";      // gelu_new (tanh), gelu, relu, silu
    bool bias_in_every_layer = false;  // UMT5 (model_type "umt5")
};

class T5LayerNormImpl : public torch::nn::Module {
  public:
    T5LayerNormImpl(int64_t dim, double eps);
    at::Tensor forward(const at::Tensor& x);

  private:
    at::Tensor weight;
    double eps_;
};
TORCH_MODULE(T5LayerNorm);

class T5BlockImpl : public torch::nn::Module {
  public:
    T5BlockImpl(const T5Config& config, bool has_relative_bias);
    // x: [B, T, d_model]; bias: [1 or B, heads, T, T], added to the scores (mask included).
    at::Tensor forward(const at::Tensor& x, const at::Tensor& bias);
    // This block's position bias for `tokens` tokens: [1, heads, T, T]. Only for blocks built
    // with a relative bias.
    at::Tensor position_bias(int64_t tokens, const at::TensorOptions& options) const;

  private:
    T5Config config_;
    torch::nn::Embedding relative_attention_bias{nullptr};
    Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
    T5LayerNorm attention_norm{nullptr};
    Linear wi_0{nullptr}, wi_1{nullptr}, wo{nullptr};  // wi_0 is "wi" when not gated
    T5LayerNorm ff_norm{nullptr};
};
TORCH_MODULE(T5Block);

class T5EncoderModelImpl : public torch::nn::Module {
  public:
    explicit T5EncoderModelImpl(const T5Config& config);
    // input_ids: [B, T] int64; attention_mask: [B, T] (1 keep, 0 padding) or undefined (every
    // token attends to every token, padding included, as the Flux pipeline calls it).
    // Returns last_hidden_state [B, T, d_model] after the final layer norm.
    at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& attention_mask = {});
    const T5Config& config() const { return config_; }

  private:
    T5Config config_;
    torch::nn::Embedding shared{nullptr};
    torch::nn::ModuleList blocks{nullptr};
    T5LayerNorm final_layer_norm{nullptr};
};
TORCH_MODULE(T5EncoderModel);

// Bidirectional relative position buckets, as T5Attention._relative_position_bucket computes
// them (in float32): [q, k] int64 for relative positions key - query.
at::Tensor t5_relative_position_buckets(int64_t queries, int64_t keys, int64_t num_buckets,
                                        int64_t max_distance, const at::Device& device);

struct DiffusersFolder;
// The T5 or UMT5 encoder of a diffusers folder's `component` (Flux's text_encoder_2, Wan's
// text_encoder) from its config.json with its weights, in `dtype`, in eval mode.
T5EncoderModel load_t5_encoder(const DiffusersFolder& folder, const std::string& component,
                               at::ScalarType dtype = at::kFloat);

// A T5EncoderModel or UMT5EncoderModel config.json (model_type "t5" or "umt5").
T5Config read_t5_config(const std::filesystem::path& config_json);

// T5EncoderModel / UMT5EncoderModel weights: "encoder.embed_tokens.weight" is tied to
// "shared.weight", and either (or both) may be in the files.
std::size_t load_t5_weights(T5EncoderModelImpl& model,
                            const std::vector<std::filesystem::path>& files,
                            const std::string& what);

}  // namespace loom
