#pragma once

// Tiny model configurations for unit tests (the shapes of diffusers' own tests).

#include "loom/model/sd/unet_2d_condition.h"
#include "loom/model/vae/autoencoder_kl.h"

namespace loom::testing {

// diffusers' LoRA-test UNet, (32, 64): a DownBlock2D, a CrossAttnDownBlock2D and their mirrors,
// with `layers` resnets (and transformers) per down block.
inline UNetConfig tiny_unet_config(int64_t layers = 2) {
    UNetConfig c;
    c.sample_size = 16;
    c.block_out_channels = {32, 64};
    c.down_block_types = {"DownBlock2D", "CrossAttnDownBlock2D"};
    c.up_block_types = {"CrossAttnUpBlock2D", "UpBlock2D"};
    c.layers_per_block = {layers, layers};
    c.num_attention_heads = {4, 4};
    c.cross_attention_dim = {32, 32};
    c.transformer_layers_per_block = {1, 1};
    return c;
}

}  // namespace loom::testing
