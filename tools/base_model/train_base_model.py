"""Train loom's bundled base model from scratch (issue 9): a tiny Stable Diffusion 1.x —
AutoencoderKL, UNet2DConditionModel and CLIPTextModel in the sd1 architecture, small enough to
commit — on procedurally generated captioned shapes (shapes.py). It knows circles, squares and
triangles in eight colours, five positions and two sizes; it has never seen a star, which is
what the quickstart's LoRA teaches it.

    scripts/train_base_model.sh            # the one command; writes datasets/loom-tiny-sd

From scratch with the defaults (VAE 5,000 steps, UNet 7,200 steps with a cosine rate) it takes
about 75 minutes on two cores. The bundled model was trained in stages over several sessions
(--vae-from / --resume continue a stage; TRAINING.json lists each stage's command).

This is a development-time tool (diffusers, transformers and torch from the project's .venv);
loom itself never runs Python. Seeded: the same arguments give the same model on one machine.

Stages: (1) the VAE, on every shape including stars (it is the image codec, not the concept);
(2) the latents of a fixed pool of base-shape images, encoded once; (3) the UNet and the text
encoder together, with the DDPM epsilon objective and 10% empty captions (for guidance).
The tokenizer is CLIP's byte-level BPE with no merges: every word is spelled by characters, so
no word list is baked into the vocabulary and the trigger word of a LoRA is new to the model.
"""

import argparse
import json
import math
import os
import shutil
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shapes  # noqa: E402

SIDE = 64  # image side in pixels; the VAE halves it three times, as SD's does: 8x8 latents


def bytes_to_unicode():
    """CLIP's byte-to-unicode table (openai/CLIP simple_tokenizer.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def write_tokenizer(folder):
    """A character-level CLIP tokenizer: the 256 byte symbols, each also with </w>, then the two
    special tokens; merges.txt has its header only."""
    os.makedirs(folder, exist_ok=True)
    symbols = bytes_to_unicode()
    vocab = {}
    for s in symbols:
        vocab[s] = len(vocab)
    for s in symbols:
        vocab[s + "</w>"] = len(vocab)
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    with open(os.path.join(folder, "vocab.json"), "w") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(folder, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n")
    special = {"content": "<|endoftext|>", "lstrip": False, "normalized": True, "rstrip": False,
               "single_word": False}
    with open(os.path.join(folder, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": dict(special, content="<|startoftext|>"), "eos_token": special,
                   "pad_token": special, "unk_token": special}, f, indent=2)
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"add_prefix_space": False, "do_lower_case": True, "errors": "replace",
                   "model_max_length": 77, "tokenizer_class": "CLIPTokenizer",
                   "bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>",
                   "pad_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}, f, indent=2)
    return len(vocab)


def image_batch(rng, count, shape_list):
    images, captions = [], []
    for _ in range(count):
        img, cap = shapes.random_item(rng, shape_list, side=SIDE)
        images.append(img)
        captions.append(cap)
    x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float() / 127.5 - 1.0
    return x, captions


def make_models(vocab_size):
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    vae = AutoencoderKL(in_channels=3, out_channels=3, block_out_channels=(16, 32, 32, 32),
                        down_block_types=("DownEncoderBlock2D",) * 4,
                        up_block_types=("UpDecoderBlock2D",) * 4, layers_per_block=1,
                        latent_channels=4, norm_num_groups=8, sample_size=SIDE)
    unet = UNet2DConditionModel(
        sample_size=SIDE // 8, in_channels=4, out_channels=4, block_out_channels=(32, 64, 64),
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        layers_per_block=1, cross_attention_dim=64, attention_head_dim=8, norm_num_groups=32)
    text_encoder = CLIPTextModel(CLIPTextConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=256, num_hidden_layers=3,
        num_attention_heads=4, max_position_embeddings=77, hidden_act="quick_gelu",
        bos_token_id=vocab_size - 2, eos_token_id=vocab_size - 1, pad_token_id=vocab_size - 1))
    return vae, unet, text_encoder


def train_vae(vae, steps, rng, log):
    opt = torch.optim.AdamW(vae.parameters(), lr=1e-3)
    every_shape = list(shapes.BASE_SHAPES) + [shapes.NEW_SHAPE]
    for step in range(1, steps + 1):
        x, _ = image_batch(rng, 16, every_shape)
        posterior = vae.encode(x).latent_dist
        recon = vae.decode(posterior.sample()).sample
        loss = (recon - x).pow(2).mean() + 1e-6 * posterior.kl().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 100 == 0 or step == steps:
            log(f"vae step {step}/{steps} loss {loss.item():.5f}")


@torch.no_grad()
def encode_pool(vae, rng, count):
    latents, captions = [], []
    for start in range(0, count, 256):
        x, caps = image_batch(rng, min(256, count - start), list(shapes.BASE_SHAPES))
        latents.append(vae.encode(x).latent_dist.mean)
        captions += caps
    latents = torch.cat(latents)
    scaling = float(1.0 / latents.std())
    return latents * scaling, captions, scaling


def train_unet(unet, text_encoder, tokenizer, latents, captions, minutes, max_steps, lr, rng,
               log):
    from diffusers import DDPMScheduler

    noise = DDPMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                          num_train_timesteps=1000)
    params = list(unet.parameters()) + list(text_encoder.parameters())
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=1e-2)
    ids_all = tokenizer(captions + [""], padding="max_length", max_length=77,
                        return_tensors="pt").input_ids
    empty_ids = ids_all[-1]
    ids_all = ids_all[:-1]
    g = torch.Generator().manual_seed(int(rng.integers(1 << 31)))
    started = time.time()
    step = 0
    while step < max_steps and time.time() - started < minutes * 60:
        step += 1
        # Cosine decay over whichever limit comes first: the last steps settle the details
        # (backgrounds, colours) that a constant rate keeps shaking.
        progress = max(step / max_steps, (time.time() - started) / (minutes * 60))
        for group in opt.param_groups:
            group["lr"] = lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))
        pick = torch.randint(0, latents.shape[0], (32,), generator=g)
        x0 = latents[pick]
        ids = ids_all[pick].clone()
        drop = torch.rand(32, generator=g) < 0.1
        ids[drop] = empty_ids
        eps = torch.randn(x0.shape, generator=g)
        t = torch.randint(0, 1000, (32,), generator=g)
        xt = noise.add_noise(x0, eps, t)
        context = text_encoder(ids)[0]
        loss = (unet(xt, t, context).sample - eps).pow(2).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 100 == 0:
            log(f"unet step {step} loss {loss.item():.4f} ({time.time() - started:.0f} s)")
    return step


def save(folder, vae, unet, text_encoder, scaling):
    vae.config.scaling_factor = scaling
    vae.register_to_config(scaling_factor=scaling)
    for name, module in (("vae", vae), ("unet", unet), ("text_encoder", text_encoder)):
        module.to(torch.float16).save_pretrained(os.path.join(folder, name),
                                                 safe_serialization=True)
        module.to(torch.float32)
    os.makedirs(os.path.join(folder, "scheduler"), exist_ok=True)
    with open(os.path.join(folder, "scheduler", "scheduler_config.json"), "w") as f:
        json.dump({"_class_name": "DDIMScheduler", "beta_start": 0.00085, "beta_end": 0.012,
                   "beta_schedule": "scaled_linear", "num_train_timesteps": 1000,
                   "set_alpha_to_one": False, "steps_offset": 1, "clip_sample": False,
                   "prediction_type": "epsilon"}, f, indent=2)
    with open(os.path.join(folder, "model_index.json"), "w") as f:
        json.dump({"_class_name": "StableDiffusionPipeline",
                   "scheduler": ["diffusers", "DDIMScheduler"],
                   "text_encoder": ["transformers", "CLIPTextModel"],
                   "tokenizer": ["transformers", "CLIPTokenizer"],
                   "unet": ["diffusers", "UNet2DConditionModel"],
                   "vae": ["diffusers", "AutoencoderKL"]}, f, indent=2)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="datasets/loom-tiny-sd")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vae-steps", type=int, default=5000)
    p.add_argument("--pool", type=int, default=8000, help="base-shape images encoded once")
    p.add_argument("--unet-minutes", type=float, default=600.0, help="a time cap")
    p.add_argument("--unet-steps", type=int, default=7200)
    p.add_argument("--lr", type=float, default=5e-4, help="UNet and text encoder peak rate")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    p.add_argument("--vae-from", help="a model folder whose trained VAE to start from")
    p.add_argument("--resume", help="a model folder whose UNet and text encoder to continue")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    started = time.time()

    def log(msg):
        print(f"[{time.time() - started:7.0f} s] {msg}", flush=True)

    from transformers import CLIPTokenizer

    work = a.out + ".partial"
    shutil.rmtree(work, ignore_errors=True)
    vocab_size = write_tokenizer(os.path.join(work, "tokenizer"))
    tokenizer = CLIPTokenizer.from_pretrained(os.path.join(work, "tokenizer"))
    vae, unet, text_encoder = make_models(vocab_size)
    if a.vae_from:  # stages can be spread over several sessions on a small machine
        from diffusers import AutoencoderKL
        vae = AutoencoderKL.from_pretrained(os.path.join(a.vae_from, "vae"),
                                            torch_dtype=torch.float32)
    if a.resume:
        from diffusers import UNet2DConditionModel
        from transformers import CLIPTextModel
        unet = UNet2DConditionModel.from_pretrained(os.path.join(a.resume, "unet"),
                                                    torch_dtype=torch.float32)
        text_encoder = CLIPTextModel.from_pretrained(os.path.join(a.resume, "text_encoder"),
                                                     torch_dtype=torch.float32)
    vae.train()
    train_vae(vae, a.vae_steps, rng, log)
    vae.eval()
    latents, captions, scaling = encode_pool(vae, rng, a.pool)
    log(f"encoded {len(captions)} images; latent scaling factor {scaling:.4f}")
    steps = train_unet(unet, text_encoder, tokenizer, latents, captions, a.unet_minutes,
                       a.unet_steps, a.lr, rng, log)
    save(work, vae, unet, text_encoder, scaling)
    # A model trained in stages (a small machine's sessions) keeps the record of each stage.
    stages = []
    for earlier in (a.vae_from, a.resume):
        record = os.path.join(earlier, "TRAINING.json") if earlier else ""
        if record and os.path.exists(record):
            with open(record) as f:
                for stage in json.load(f).get("stages", []):
                    if stage not in stages:
                        stages.append(stage)
    stages.append({"command": "scripts/train_base_model.sh " + " ".join(sys.argv[1:]),
                   "seed": a.seed, "vae_steps": a.vae_steps, "pool": a.pool, "unet_steps": steps,
                   "lr": a.lr, "seconds": round(time.time() - started)})
    with open(os.path.join(work, "TRAINING.json"), "w") as f:
        json.dump({"image_side": SIDE, "stages": stages}, f, indent=2)
    shutil.rmtree(a.out, ignore_errors=True)
    os.replace(work, a.out)
    log(f"wrote {a.out} ({steps} UNet steps)")


if __name__ == "__main__":
    main()
