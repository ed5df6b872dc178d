#!/usr/bin/env python3
"""Reference side of scripts/bench_unet.sh: diffusers UNet forward+backward time on the CPU.

    unet_step.py MODEL_DIR THREADS REPEATS BATCH SIZE

Builds nothing itself: loads the UNet that bench/make_bench_unet.py saved, so loom and diffusers
run the very same weights. Prints one line per timed step: "step_seconds <s>".
"""
import sys
import time

import torch
from diffusers import UNet2DConditionModel


def main(model_dir, threads, repeats, batch, size):
    torch.set_num_threads(threads)
    unet = UNet2DConditionModel.from_pretrained(model_dir, subfolder="unet")
    unet.train()
    for p in unet.parameters():
        p.requires_grad_(True)
    g = torch.Generator().manual_seed(0)
    sample = torch.randn(batch, 4, size, size, generator=g)
    ctx = torch.randn(batch, 77, unet.config.cross_attention_dim, generator=g)
    t = torch.tensor([500] * batch)
    for i in range(repeats + 1):  # the first step warms up and is not printed
        unet.zero_grad(set_to_none=True)
        start = time.perf_counter()
        unet(sample, t, ctx).sample.pow(2).mean().backward()
        elapsed = time.perf_counter() - start
        if i > 0:
            print(f"step_seconds {elapsed:.6f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
