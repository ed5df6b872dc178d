#pragma once

// What the diffusion transformers (Flux, Wan) share: the rotary position embedding, its
// per-axis tables, and attention over [B, S, heads, head_dim] tensors. Private to the model
// layer.
//
// ref: diffusers models/embeddings.py::{get_1d_rotary_pos_embed (use_real=True,
//      repeat_interleave_real=True), apply_rotary_emb (use_real_unbind_dim=-1)};
//      transformer_wan.py::WanAttnProcessor's apply_rotary_emb (the same rotation)

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>

namespace loom::dit {

// Where the rotary cosines are taken: of the float64 angles (diffusers' get_1d_rotary_pos_embed:
// Flux, Wan), of the angles rounded to float32 first (Z-Image's RopeEmbedder, torch.polar), or of
// angles computed in float32 from float32 frequencies (Qwen-Image's QwenEmbedRope.rope_params).
enum class AnglePrecision { kFloat64, kFloat32, kFloat32Throughout };

// cos and sin of each position's angles for one axis of `dim` (even) channels: angle_i =
// position / theta^(2i/dim), computed in float64 as the reference does, each repeated for the
// two channels of its pair; [S, dim] float32 each. `positions`: [S], any numeric dtype.
std::pair<at::Tensor, at::Tensor> rotary_tables(
    const at::Tensor& positions, int64_t dim, double theta,
    AnglePrecision precision = AnglePrecision::kFloat64);

// x [B, S, H, D] with each pair (x0, x1) of its last dimension turned by its position's angle:
// (x0 cos - x1 sin, x1 cos + x0 sin), computed in float32 and returned in x's dtype. cos, sin:
// [S, D] float32 shared by the batch, or [B, S, D] (each item its own positions). One autograd
// operation that saves only the tables.
at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// A [B, S] mask of the keys attended to (bool, or 0/1) as a bias [B, 1, 1, S] float32: 0 where
// attended, -inf where not — how the pipelines' boolean masks reach attention.
at::Tensor key_padding_bias(const at::Tensor& keep);

// Scaled dot-product attention over [B, S, H, D] queries and [B, S', H, D] keys and values,
// back to [B, S, H*D] in the queries' dtype.
at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);
// The same with `bias` added to the scores before the softmax: [B or 1, 1 or H, S, S'] floating
// point (undefined: none). A float mask is a bias, as torch's SDPA (and diffusers) read one.
at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const at::Tensor& bias);

}  // namespace loom::dit
