#!/usr/bin/env python3
"""Saves the benchmark Z-Image transformer (Z-Image's block layout at a CPU-sized width, random
weights) as a diffusers folder, so loom and diffusers + peft train LoRAs on the same model
(issue 42).

    make_bench_zimage.py OUT_DIR

Shape: 4 attention heads of 64 (width 256; Z-Image has 30 of 128), 4 main layers and 2 noise- and
2 context-refiner layers (Z-Image: 30 and 2 + 2), caption width 256 (Qwen3-4B's is 2560), 16
latent channels in 2x2 patches, RoPE axes (16, 24, 24).
"""
import json
import os
import sys

import torch
from diffusers import ZImageTransformer2DModel


def main(out):
    torch.manual_seed(0)
    model = ZImageTransformer2DModel(in_channels=16, dim=256, n_layers=4, n_refiner_layers=2,
                                     n_heads=4, n_kv_heads=4, cap_feat_dim=256,
                                     axes_dims=[16, 24, 24], axes_lens=[512, 128, 128])
    # diffusers zero-initialises nothing here, but the pad tokens start at zero: make them real.
    with torch.no_grad():
        model.x_pad_token.normal_()
        model.cap_pad_token.normal_()
    model.save_pretrained(os.path.join(out, "transformer"), safe_serialization=True)
    with open(os.path.join(out, "model_index.json"), "w") as f:
        json.dump({"_class_name": "ZImagePipeline",
                   "transformer": ["diffusers", "ZImageTransformer2DModel"]}, f)
    print(f"benchmark ZImageTransformer2DModel written to {out}: "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")


if __name__ == "__main__":
    main(sys.argv[1])
