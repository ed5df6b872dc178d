#!/usr/bin/env python3
"""Reference side of scripts/bench_wan.sh: one LoRA training step of the benchmark Wan
transformer with diffusers + peft on the CPU — forward, flow-matching MSE, backward, AdamW on the
LoRA parameters — as ai-toolkit trains Wan 2.1.

    wan_lora_step.py MODEL_DIR THREADS REPEATS BATCH LATENT_FRAMES LATENT_SIZE TEXT_TOKENS RANK

The LoRA targets every Linear of the blocks (ai-toolkit's Wan rule: block names ['blocks']),
rank RANK, alpha RANK. Prints two lines per timed step: "step_seconds <s>" and
"phase_seconds forward <s> backward <s> optimizer <s>".
"""
import sys
import time

import torch
from diffusers import WanTransformer3DModel
from peft import LoraConfig


def block_linears(model):
    return sorted(name for name, m in model.named_modules()
                  if isinstance(m, torch.nn.Linear) and name.startswith("blocks."))


def main(model_dir, threads, repeats, batch, frames, size, tokens, rank):
    torch.set_num_threads(threads)
    model = WanTransformer3DModel.from_pretrained(model_dir, subfolder="transformer")
    model.requires_grad_(False)
    model.add_adapter(LoraConfig(r=rank, lora_alpha=rank, init_lora_weights="gaussian",
                                 target_modules=block_linears(model)))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, eps=1e-6, weight_decay=0.01)
    g = torch.Generator().manual_seed(0)
    c = model.config
    x0 = torch.randn(batch, c.in_channels, frames, size, size, generator=g)
    noise = torch.randn(x0.shape, generator=g)
    text = torch.randn(batch, tokens, c.text_dim, generator=g)
    t = torch.full((batch,), 600.0)
    for i in range(repeats + 1):  # the first step warms up and is not printed
        start = time.perf_counter()
        s = (t / 1000).view(-1, 1, 1, 1, 1)
        noisy = (1 - s) * x0 + s * noise
        pred = model(hidden_states=noisy, timestep=t, encoder_hidden_states=text).sample
        forward_done = time.perf_counter()
        loss = torch.nn.functional.mse_loss(pred, noise - x0)
        loss.backward()
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
    main(sys.argv[1], *map(int, sys.argv[2:9]))
