#include "loom/model/nn/embeddings.h"

#include <ATen/ATen.h>

#include <cmath>

namespace loom {

at::Tensor timestep_embedding(const at::Tensor& timesteps, int64_t dim, bool flip_sin_to_cos,
                              double downscale_freq_shift, double scale, double max_period) {
    const int64_t half = dim / 2;
    const auto options = at::TensorOptions().dtype(at::kFloat).device(timesteps.device());
    at::Tensor exponent = -std::log(max_period) * at::arange(0, half, options);
    exponent = exponent / (static_cast<double>(half) - downscale_freq_shift);
    at::Tensor emb = timesteps.unsqueeze(1).to(at::kFloat) * at::exp(exponent).unsqueeze(0);
    emb = scale * emb;
    emb = at::cat({at::sin(emb), at::cos(emb)}, -1);
    if (flip_sin_to_cos) emb = at::cat({emb.slice(1, half), emb.slice(1, 0, half)}, -1);
    if (dim % 2 == 1) emb = at::constant_pad_nd(emb, {0, 1, 0, 0}, 0);
    return emb;
}

TimestepEmbeddingImpl::TimestepEmbeddingImpl(int64_t in_channels, int64_t time_embed_dim) {
    linear_1 = register_module("linear_1", Linear(in_channels, time_embed_dim));
    linear_2 = register_module("linear_2", Linear(time_embed_dim, time_embed_dim));
}

at::Tensor TimestepEmbeddingImpl::forward(const at::Tensor& x) {
    return linear_2(at::silu(linear_1(x)));
}

}  // namespace loom
