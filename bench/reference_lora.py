#!/usr/bin/env python3
"""The Python reference of bench/throughput.py: the LoRA training loop a diffusers + peft user
would write (diffusers' train_text_to_image_lora.py, ai-toolkit's sd_trainer), at the settings
the loom job of the same round uses.

  * UNet2DConditionModel from the model folder, frozen, with a peft LoRA (rank R, alpha A, no
    dropout) on the modules loom targets by default, ai-toolkit's set: every Linear and 1x1
    Conv2d of the UNet (lora/target_rules.h);
  * latents and text embeddings cached before step 1 (cache_latents, cache_text_embeddings), the
    latent a VAE sample scaled by scaling_factor, as loom caches them;
  * every step: a batch in a shuffled epoch order, Gaussian noise, timesteps uniform in
    [0, 1000), the DDPM scaled-linear add_noise, epsilon-prediction MSE, backward,
    clip_grad_norm_(1.0), torch.optim.AdamW(lr, eps=1e-6, weight_decay=0.01), zero_grad;
  * the LoRA saved as safetensors after the last step (loom saves its file too).

Prints one JSON line per step {"step", "time" (epoch seconds at the end of the step), "loss"}
and a last line {"lora_parameters": N}.

    reference_lora.py MODEL DATA RESOLUTION BATCH STEPS RANK ALPHA LR THREADS OUT_FILE
        [--device cuda] [--dtype bf16] [--gradient-checkpointing]

On a GPU (scripts/gpu_check.sh) the UNet, VAE and text encoder load in --dtype (the LoRA stays
float32, peft's default) on --device, and --gradient-checkpointing turns on the UNet's own.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from PIL import Image



def lora_targets(unet):
    """ai-toolkit's module set: the name of every Linear and 1x1 Conv2d of the UNet."""
    return [name for name, m in unet.named_modules()
            if isinstance(m, torch.nn.Linear)
            or (isinstance(m, torch.nn.Conv2d) and m.kernel_size == (1, 1))]


def load_images(folder, resolution):
    """(images in [-1, 1] as N x 3 x R x R, captions): centre-cropped squares, as the bucket of a
    square dataset resolves."""
    images, captions = [], []
    for name in sorted(os.listdir(folder)):
        stem, ext = os.path.splitext(name)
        if ext.lower() not in (".png", ".jpg", ".jpeg"):
            continue
        img = Image.open(os.path.join(folder, name)).convert("RGB")
        side = min(img.size)
        left, top = (img.width - side) // 2, (img.height - side) // 2
        img = img.crop((left, top, left + side, top + side)).resize((resolution, resolution),
                                                                     Image.BICUBIC)
        images.append(torch.from_numpy(np.asarray(img)).permute(2, 0, 1).float() / 127.5 - 1.0)
        with open(os.path.join(folder, stem + ".txt")) as f:
            captions.append(f.read().strip())
    return torch.stack(images), captions


def main(model, data, resolution, batch, steps, rank, alpha, lr, threads, out_file,
         device="cpu", dtype="fp32", gradient_checkpointing=False):
    torch.set_num_threads(threads)
    dev = torch.device(device)
    dt = torch.bfloat16 if dtype == "bf16" else torch.float32
    torch.manual_seed(0)
    from diffusers import AutoencoderKL, DDPMScheduler, UNet2DConditionModel
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict
    from safetensors.torch import save_file
    from transformers import CLIPTextModel, CLIPTokenizer

    f32 = dict(torch_dtype=dt)
    vae = AutoencoderKL.from_pretrained(model, subfolder="vae", **f32).eval().to(dev)
    text_encoder = CLIPTextModel.from_pretrained(model, subfolder="text_encoder",
                                                 **f32).eval().to(dev)
    tokenizer = CLIPTokenizer.from_pretrained(model, subfolder="tokenizer")
    unet = UNet2DConditionModel.from_pretrained(model, subfolder="unet", **f32).to(dev)
    if gradient_checkpointing:
        unet.enable_gradient_checkpointing()
    schedule = DDPMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                             num_train_timesteps=1000)
    unet.requires_grad_(False)
    unet.add_adapter(LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0,
                                init_lora_weights=True, target_modules=lora_targets(unet)))
    unet.train()
    params = [p for p in unet.parameters() if p.requires_grad]

    images, captions = load_images(data, resolution)
    with torch.no_grad():
        images = images.to(dev, dt)
        latents = torch.cat([vae.encode(images[i:i + 8]).latent_dist.sample()
                             for i in range(0, len(images), 8)]) * vae.config.scaling_factor
        ids = tokenizer(captions, padding="max_length", max_length=77, truncation=True,
                        return_tensors="pt").input_ids.to(dev)
        contexts = text_encoder(ids)[0]
        latents = latents.float()
    del vae, text_encoder

    opt = torch.optim.AdamW(params, lr=lr, eps=1e-6, weight_decay=0.01)
    order = []
    for step in range(1, steps + 1):
        if len(order) < batch:
            order += torch.randperm(len(latents)).tolist()
        pick, order = order[:batch], order[batch:]
        x0, context = latents[pick], contexts[pick]
        noise = torch.randn_like(x0)
        t = torch.randint(0, 1000, (batch,), device=dev)
        pred = unet(schedule.add_noise(x0, noise, t).to(dt), t, context).sample
        loss = torch.nn.functional.mse_loss(pred.float(), noise)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(json.dumps({"step": step, "time": time.time(), "loss": loss.item()}), flush=True)
    save_file({k: v.contiguous() for k, v in get_peft_model_state_dict(unet).items()}, out_file)
    print(json.dumps({"lora_parameters": sum(p.numel() for p in params)}), flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(usage=__doc__)
    for name in ("model", "data", "resolution", "batch", "steps", "rank", "alpha", "lr",
                 "threads", "out_file"):
        p.add_argument(name)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--gradient-checkpointing", action="store_true")
    a = p.parse_args()
    main(a.model, a.data, int(a.resolution), int(a.batch), int(a.steps), int(a.rank),
         float(a.alpha), float(a.lr), int(a.threads), a.out_file, a.device, a.dtype,
         a.gradient_checkpointing)
