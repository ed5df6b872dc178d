#pragma once

// Flex.2's transformer input: Flux.1's transformer whose x_embedder takes, beside the noisy
// latents, an inpainting latent, its mask and a control latent on the channels — 16 + 16 + 1 +
// 16, packed 2x2 into 196 — as ai-toolkit's Flex2.condition_noisy_latents concatenates them
// before packing and its Flex2Pipeline after (the same thing: packing keeps channels outermost).
// Without inpaint images the inpainting latent is zeros and the mask ones ("inpaint everything":
// ai-toolkit's input when it has none, or drops it); without a control image the control latent
// is zeros.
//
// ref: ai-toolkit extensions_built_in/flex2/flex2.py::Flex2.condition_noisy_latents,
//      extensions_built_in/flex2/pipeline.py::Flex2Pipeline.__call__

#include <ATen/core/Tensor.h>

#include "loom/model/flux/flux_transformer.h"

namespace loom {

// The transformer's input channels of a Flex.2 transformer over `latent_channels`-channel
// latents: 4 x (3 x latent_channels + 1), 196 for Flux's 16.
int64_t flex2_in_channels(int64_t latent_channels);
// Whether a Flux transformer config is Flex.2's: its input those channels, its output the
// latents' (a FluxPipeline folder of Flex.2 says so nowhere else).
bool is_flex2_transformer(const FluxConfig& config);

// [B, 3C + 1, h, w]: `latents` [B, C, h, w], `inpaint` ([B, C + 1, h, w]: the masked clean
// latents and the inpaint mask, StepConditioning::inpaint) or the no-inpaint input (zeros, mask
// of ones) when undefined, and `control` ([B, C, h, w] clean control latents) or zeros when
// undefined.
at::Tensor flex2_channels(const at::Tensor& latents, const at::Tensor& control,
                          const at::Tensor& inpaint = {});

}  // namespace loom
