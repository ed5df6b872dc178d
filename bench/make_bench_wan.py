#!/usr/bin/env python3
"""Saves the benchmark Wan transformer (Wan 2.1's block layout at a CPU-sized width, random
weights) as a diffusers folder, so loom and diffusers+peft train LoRAs on the same model.

    make_bench_wan.py OUT_DIR

Shape: 4 attention heads of 64 (inner width 256; Wan 2.1 1.3B has 12 of 128), 4 blocks (1.3B:
30), feed-forward 1024 (1.3B: 8960), UMT5 width 256 (4096), 16 latent channels in 1x2x2 patches,
RoPE split of a head as Wan's (frames 22, rows 21 x 2, columns 21 x 2 of 64).
"""
import json
import os
import sys

import torch
from diffusers import WanTransformer3DModel


def main(out):
    torch.manual_seed(0)
    model = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=4,
                                  attention_head_dim=64, in_channels=16, out_channels=16,
                                  text_dim=256, freq_dim=256, ffn_dim=1024, num_layers=4,
                                  cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                                  eps=1e-6)
    model.save_pretrained(os.path.join(out, "transformer"), safe_serialization=True)
    with open(os.path.join(out, "model_index.json"), "w") as f:
        json.dump({"_class_name": "WanPipeline",
                   "transformer": ["diffusers", "WanTransformer3DModel"]}, f)
    print(f"benchmark Wan transformer written to {out}: "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")


if __name__ == "__main__":
    main(sys.argv[1])
