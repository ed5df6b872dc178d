#!/usr/bin/env python3
"""Saves the benchmark Flux transformer (Flux.1's block layout at a CPU-sized width, random
weights) as a diffusers folder, so loom and diffusers+peft train LoRAs on the same model.

    make_bench_flux.py OUT_DIR

Shape: 4 attention heads of 64 (inner width 256; Flux.1 has 24 of 128), 2 double-stream and 4
single-stream blocks (Flux.1: 19 and 38), T5 width 256, pooled CLIP width 128, 16 latent
channels packed 2x2 (64 in), the dev guidance embedding, RoPE axes (16, 24, 24).
"""
import json
import os
import sys

import torch
from diffusers import FluxTransformer2DModel


def main(out):
    torch.manual_seed(0)
    model = FluxTransformer2DModel(patch_size=1, in_channels=64, num_layers=2,
                                   num_single_layers=4, attention_head_dim=64,
                                   num_attention_heads=4, joint_attention_dim=256,
                                   pooled_projection_dim=128, guidance_embeds=True,
                                   axes_dims_rope=(16, 24, 24))
    model.save_pretrained(os.path.join(out, "transformer"), safe_serialization=True)
    with open(os.path.join(out, "model_index.json"), "w") as f:
        json.dump({"_class_name": "FluxPipeline",
                   "transformer": ["diffusers", "FluxTransformer2DModel"]}, f)
    print(f"benchmark Flux transformer written to {out}: "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")


if __name__ == "__main__":
    main(sys.argv[1])
