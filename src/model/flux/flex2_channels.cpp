#include "loom/model/flux/flex2_channels.h"

#include <ATen/ATen.h>

namespace loom {

int64_t flex2_in_channels(int64_t latent_channels) {
    return 4 * (3 * latent_channels + 1);
}

bool is_flex2_transformer(const FluxConfig& c) {
    return c.in_channels != c.out_channels &&
           c.in_channels == flex2_in_channels(c.out_channels / 4);
}

at::Tensor flex2_channels(const at::Tensor& latents, const at::Tensor& control,
                          const at::Tensor& inpaint) {
    const at::Tensor inpainting =
        inpaint.defined()
            ? inpaint.to(latents.scalar_type())
            : at::cat({at::zeros_like(latents),
                       at::ones({latents.size(0), 1, latents.size(2), latents.size(3)},
                                latents.options())},
                      1);
    const at::Tensor ctrl =
        control.defined() ? control.to(latents.scalar_type()) : at::zeros_like(latents);
    return at::cat({latents, inpainting, ctrl}, 1);
}

}  // namespace loom
