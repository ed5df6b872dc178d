#pragma once

// What the text encoder(s) hand the denoiser: the per-token context for cross-attention and,
// for models that have one (SDXL), a pooled embedding — two tensors with their own shapes, any
// token count — and, for a family whose denoiser masks the text (Chroma), which of the tokens it
// attends to. Caches hold one prompt's conditioning as named tensors ("context", "text_embeds",
// "context_mask"); `to_named` and `from_named` are the one place that naming lives.

#include <ATen/core/Tensor.h>

#include "loom/model/loading/tensor_file.h"

namespace loom {

struct TextConditioning {
    at::Tensor context;       // [B, tokens, cross_attention_dim]
    at::Tensor text_embeds;   // [B, pooled] (SDXL) or undefined
    at::Tensor context_mask;  // [B, tokens] float32, 1 for a token attended to, or undefined

    // Prompt `index` of the batch, unbatched: "context" [tokens, width] and, when present,
    // "text_embeds" [pooled] and "context_mask" [tokens].
    NamedTensors to_named(std::int64_t index = 0) const;
    // One prompt's conditioning from its named tensors, each with a batch dimension of 1 added.
    // Throws loom::FormatError naming `source` when "context" is missing.
    static TextConditioning from_named(const NamedTensors& tensors, const std::string& source);
};

}  // namespace loom
