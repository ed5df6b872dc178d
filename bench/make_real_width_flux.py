#!/usr/bin/env python3
"""A Flux.1-dev pipeline folder whose transformer blocks are Flux.1-dev's at real width (issue 64):
hidden 3072 (24 heads of 128), MLP ratio 4, RoPE axes (16, 56, 56), the guidance embedding; 2
double-stream and 4 single-stream blocks (Flux.1: 19 and 38), about 1.25B parameters, saved in
bf16 (2.5 GB). The text encoders, tokenizers, VAE and scheduler are the tiny ones of the parity
folder (tests/parity/flux_reference.py), so the context and pooled projections take their widths
(32): the blocks, which are what streams, are full size; only the text the step sees is small.

    make_real_width_flux.py PARITY_FLUX_DIR OUT_DIR
"""
import os
import shutil
import sys

import torch
from diffusers import FluxTransformer2DModel


def main(parity_flux, out):
    if os.path.exists(os.path.join(out, "transformer", "config.json")):
        return
    shutil.copytree(parity_flux, out, ignore=shutil.ignore_patterns("transformer"),
                    dirs_exist_ok=True)
    torch.manual_seed(0)
    with torch.device("cpu"):
        model = FluxTransformer2DModel(patch_size=1, in_channels=64, num_layers=2,
                                       num_single_layers=4, attention_head_dim=128,
                                       num_attention_heads=24, joint_attention_dim=32,
                                       pooled_projection_dim=32, guidance_embeds=True,
                                       axes_dims_rope=(16, 56, 56)).to(torch.bfloat16)
    model.save_pretrained(os.path.join(out, "transformer"), safe_serialization=True,
                          max_shard_size="1GB")
    params = sum(p.numel() for p in model.parameters())
    print(f"{out}: {params / 1e9:.2f}B parameters, 2 double + 4 single blocks at width 3072")


if __name__ == "__main__":
    main(*sys.argv[1:3])
