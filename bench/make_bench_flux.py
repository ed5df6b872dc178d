#!/usr/bin/env python3
"""Saves the benchmark Flux transformer (Flux.1's block layout at a CPU-sized width, random
weights) as a diffusers folder, so loom and diffusers+peft train LoRAs on the same model; with
--chroma, the Chroma transformer of the same blocks (issue 40).

    make_bench_flux.py OUT_DIR [--chroma]

Shape: 4 attention heads of 64 (inner width 256; Flux.1 has 24 of 128), 2 double-stream and 4
single-stream blocks (Flux.1: 19 and 38), T5 width 256, pooled CLIP width 128, 16 latent
channels packed 2x2 (64 in), the dev guidance embedding, RoPE axes (16, 24, 24). Chroma: the same
blocks without their modulation Linears and no pooled input, the approximator at Chroma's
channels and depth (64, 5 layers) and a CPU-sized hidden width (1024; Chroma's is 5120).
"""
import json
import os
import sys

import torch
from diffusers import ChromaTransformer2DModel, FluxTransformer2DModel

BLOCKS = dict(patch_size=1, in_channels=64, num_layers=2, num_single_layers=4,
              attention_head_dim=64, num_attention_heads=4, joint_attention_dim=256,
              axes_dims_rope=(16, 24, 24))


def main(out, chroma):
    torch.manual_seed(0)
    if chroma:
        model = ChromaTransformer2DModel(**BLOCKS, approximator_num_channels=64,
                                         approximator_hidden_dim=1024, approximator_layers=5)
        pipeline, name = "ChromaPipeline", "ChromaTransformer2DModel"
    else:
        model = FluxTransformer2DModel(**BLOCKS, pooled_projection_dim=128, guidance_embeds=True)
        pipeline, name = "FluxPipeline", "FluxTransformer2DModel"
    model.save_pretrained(os.path.join(out, "transformer"), safe_serialization=True)
    with open(os.path.join(out, "model_index.json"), "w") as f:
        json.dump({"_class_name": pipeline, "transformer": ["diffusers", name]}, f)
    print(f"benchmark {name} written to {out}: "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")


if __name__ == "__main__":
    main(sys.argv[1], "--chroma" in sys.argv[2:])
