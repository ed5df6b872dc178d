#!/usr/bin/env python3
"""Reference side of scripts/bench_zimage.sh: one LoRA training step of the benchmark Z-Image
transformer with diffusers + peft on the CPU — forward as ai-toolkit's get_noise_prediction
calls it (a list of latents, the timestep as (1000 - t) / 1000, the output negated), flow-matching
MSE, backward, AdamW on the LoRA parameters.

    zimage_lora_step.py MODEL_DIR THREADS REPEATS BATCH LATENT_SIZE TEXT_TOKENS RANK

The caption of each item is TEXT_TOKENS / 4 tokens (the pipeline passes only the real tokens).
The LoRA targets every Linear of the main layers (ai-toolkit's "layers"), rank RANK, alpha RANK.
Prints "step_seconds <s>" and "phase_seconds forward <s> backward <s> optimizer <s>" per timed step.
"""
import sys
import time

import torch
from diffusers import ZImageTransformer2DModel
from peft import LoraConfig


def main(model_dir, threads, repeats, batch, size, tokens, rank):
    torch.set_num_threads(threads)
    model = ZImageTransformer2DModel.from_pretrained(model_dir, subfolder="transformer")
    model.requires_grad_(False)
    targets = sorted(name for name, m in model.named_modules()
                     if isinstance(m, torch.nn.Linear) and name.startswith("layers."))
    model.add_adapter(LoraConfig(r=rank, lora_alpha=rank, init_lora_weights="gaussian",
                                 target_modules=targets))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, eps=1e-6, weight_decay=0.01)
    g = torch.Generator().manual_seed(0)
    c = model.config
    x0 = torch.randn(batch, c.in_channels, size, size, generator=g)
    noise = torch.randn(x0.shape, generator=g)
    captions = [torch.randn(tokens // 4, c.cap_feat_dim, generator=g) for _ in range(batch)]
    t = torch.full((batch,), 600.0)
    for i in range(repeats + 1):  # the first step warms up and is not printed
        start = time.perf_counter()
        sigma = (t / 1000).view(-1, 1, 1, 1)
        noisy = (1 - sigma) * x0 + sigma * noise
        out = model(list(noisy.unsqueeze(2).unbind(0)), (1000 - t) / 1000, captions,
                    return_dict=False)[0]
        pred = -torch.stack([o.float() for o in out]).squeeze(2)
        forward_done = time.perf_counter()
        torch.nn.functional.mse_loss(pred, noise - x0).backward()
        backward_done = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        end = time.perf_counter()
        if i > 0:
            print(f"step_seconds {end - start:.6f}", flush=True)
            print(f"phase_seconds forward {forward_done - start:.6f} backward "
                  f"{backward_done - forward_done:.6f} optimizer {end - backward_done:.6f}",
                  flush=True)


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:8]))
