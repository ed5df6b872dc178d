#!/usr/bin/env python3
"""Saves the benchmark UNet (a small SD-1-shaped UNet with random weights) as a diffusers
folder, so loom and diffusers time the same model.

    make_bench_unet.py OUT_DIR
"""
import json
import os
import sys

import torch
from diffusers import UNet2DConditionModel


def main(out):
    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        block_out_channels=(64, 128, 256), layers_per_block=2, sample_size=32, in_channels=4,
        out_channels=4,
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=128, attention_head_dim=4)
    unet.save_pretrained(os.path.join(out, "unet"), safe_serialization=True)
    with open(os.path.join(out, "model_index.json"), "w") as f:
        json.dump({"_class_name": "StableDiffusionPipeline",
                   "unet": ["diffusers", "UNet2DConditionModel"]}, f)
    print(f"benchmark UNet written to {out}: "
          f"{sum(p.numel() for p in unet.parameters()) / 1e6:.2f}M parameters")


if __name__ == "__main__":
    main(sys.argv[1])
