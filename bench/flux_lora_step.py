#!/usr/bin/env python3
"""Reference side of scripts/bench_flux.sh: one LoRA training step of the benchmark Flux
transformer with diffusers + peft on the CPU — forward, flow-matching MSE, backward, AdamW on the
LoRA parameters — as ai-toolkit and diffusers' train_dreambooth_lora_flux.py run it. A
ChromaPipeline folder (make_bench_flux.py --chroma) trains the Chroma transformer instead, with
ChromaPipeline's float attention mask over a prompt of a quarter of the text tokens.

    flux_lora_step.py MODEL_DIR THREADS REPEATS BATCH LATENT_SIZE TEXT_TOKENS RANK

The LoRA targets every Linear of the double- and single-stream blocks (ai-toolkit's Flux rule),
rank RANK, alpha RANK. Prints two lines per timed step: "step_seconds <s>" and
"phase_seconds forward <s> backward <s> optimizer <s>".
"""
import sys
import time

import json
import os

import torch
from diffusers import ChromaTransformer2DModel, FluxTransformer2DModel
from diffusers.pipelines.flux.pipeline_flux import FluxPipeline
from peft import LoraConfig


def block_linears(model):
    return sorted(name for name, m in model.named_modules()
                  if isinstance(m, torch.nn.Linear) and
                  name.startswith(("transformer_blocks.", "single_transformer_blocks.")))


def main(model_dir, threads, repeats, batch, size, tokens, rank):
    torch.set_num_threads(threads)
    with open(os.path.join(model_dir, "model_index.json")) as f:
        chroma = json.load(f)["_class_name"] == "ChromaPipeline"
    cls = ChromaTransformer2DModel if chroma else FluxTransformer2DModel
    model = cls.from_pretrained(model_dir, subfolder="transformer")
    model.requires_grad_(False)
    model.add_adapter(LoraConfig(r=rank, lora_alpha=rank, init_lora_weights="gaussian",
                                 target_modules=block_linears(model)))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, eps=1e-6, weight_decay=0.01)
    g = torch.Generator().manual_seed(0)
    c = model.config
    latents = torch.randn(batch, c.in_channels // 4, size, size, generator=g)
    x0 = FluxPipeline._pack_latents(latents, batch, c.in_channels // 4, size, size)
    noise = torch.randn(x0.shape, generator=g)
    text = torch.randn(batch, tokens, c.joint_attention_dim, generator=g)
    if chroma:
        # ChromaPipeline's mask: the prompt's tokens and the first padding one, every image token.
        text_mask = (torch.arange(tokens) <= tokens // 4).float().expand(batch, tokens)
        extra = {"attention_mask": torch.cat([text_mask, torch.ones(batch, x0.shape[1])], dim=1)}
    else:
        extra = {"guidance": torch.ones(batch),
                 "pooled_projections": torch.randn(batch, c.pooled_projection_dim, generator=g)}
    img_ids = FluxPipeline._prepare_latent_image_ids(batch, size // 2, size // 2, "cpu",
                                                     torch.float32)
    txt_ids = torch.zeros(tokens, 3)
    t = torch.full((batch,), 0.6)
    for i in range(repeats + 1):  # the first step warms up and is not printed
        start = time.perf_counter()
        noisy = (1 - t.view(-1, 1, 1)) * x0 + t.view(-1, 1, 1) * noise
        pred = model(hidden_states=noisy, encoder_hidden_states=text, timestep=t,
                     img_ids=img_ids, txt_ids=txt_ids, **extra).sample
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
    main(sys.argv[1], *map(int, sys.argv[2:8]))
