#pragma once

// ref: diffusers models/embeddings.py::{get_timestep_embedding, Timesteps, TimestepEmbedding}.

#include "loom/model/nn/adaptable_layers.h"

namespace loom {

// Sinusoidal embedding of `timesteps` ([N], any numeric dtype) -> [N, dim] float32.
at::Tensor timestep_embedding(const at::Tensor& timesteps, int64_t dim, bool flip_sin_to_cos,
                              double downscale_freq_shift, double scale = 1.0,
                              double max_period = 10000.0);

// linear_1 -> SiLU -> linear_2
class TimestepEmbeddingImpl : public torch::nn::Module {
  public:
    TimestepEmbeddingImpl(int64_t in_channels, int64_t time_embed_dim);
    at::Tensor forward(const at::Tensor& x);

  private:
    Linear linear_1{nullptr};
    Linear linear_2{nullptr};
};
TORCH_MODULE(TimestepEmbedding);

}  // namespace loom
