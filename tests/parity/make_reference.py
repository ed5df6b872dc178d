#!/usr/bin/env python3
"""Builds tiny random Stable Diffusion models with diffusers/transformers and their reference
outputs, for loom's parity tests.

    make_reference.py OUT_DIR

Writes, with fixed seeds:
  OUT/sd1/   a StableDiffusionPipeline folder (unet, vae, text_encoder, tokenizer, scheduler)
  OUT/sdxl/  a StableDiffusionXLPipeline folder (two text encoders, text_time UNet)
  OUT/cases/<name>.inputs.safetensors and <name>.expected.safetensors for each component
  OUT/cases/scheduler.safetensors  DDPM/DDIM/Euler reference values
  OUT/t5_tokenizer/, OUT/t5/, OUT/umt5/ and their cases (t5_reference.py)
  OUT/qwen2_5_vl/, OUT/qwen3/ and their decoder_lm cases (qwen_reference.py)
  OUT/qwen2_tokenizer/, OUT/zimage/ and their cases (zimage_reference.py)
  OUT/qwenimage/ a QwenImagePipeline folder and its prompt case (qwen_reference.py)
  OUT/qwenimage_edit/, OUT/qwenimage_edit_plus/ and their cases (qwen_edit_reference.py)
  OUT/flux/, OUT/flux_schnell/ and their cases (flux_reference.py)
  OUT/optimizers/ 8-bit AdamW and Prodigy steps (optimizer_reference.py)
  OUT/single_file/ SD 1.x and SDXL single-file checkpoints, their folders and a hub cache
                   (single_file_reference.py)
  OUT/quantization/ reference weight quantization, checked against optimum-quanto
                   (quantization_reference.py)
  OUT/wan/         a tiny Wan 2.1 transformer, VAE and pipeline and their cases (wan_reference.py)
Everything is float32 on the CPU.
"""
import json
import os
import sys
from collections import Counter

import torch
from safetensors.torch import save_file

from reference_cases import save_case

from diffusers import (AutoencoderKL, DDIMScheduler, DDPMScheduler, EulerDiscreteScheduler,
                       StableDiffusionPipeline, StableDiffusionXLPipeline, UNet2DConditionModel)
import flux_reference
import optimizer_reference
import quantization_reference
import single_file_reference
import qwen_edit_reference
import qwen_reference
import t5_reference
import wan_reference
import zimage_reference
from transformers import (CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection,
                          CLIPTokenizer)

CORPUS = ("a photo of a cat sitting on a red chair . a painting of a dog in the snow , "
          "the quick brown fox jumps over the lazy dog . sks style portrait of a woman with "
          "blue hair , highly detailed , 4k , trending . an astronaut riding a horse on mars . "
          "a lighthouse on a cliff at sunset , golden hour , p3r5on holding a sign .")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def train_tiny_bpe(folder, num_merges=120):
    """A CLIP-style vocab: byte symbols, the same with </w>, learned merges, specials."""
    byte_chars = list(bytes_to_unicode().values())
    vocab = byte_chars + [c + "</w>" for c in byte_chars]
    words = Counter(CORPUS.split())
    seqs = {w: list(w[:-1]) + [w[-1] + "</w>"] for w in words}
    merges = []
    for _ in range(num_merges):
        pairs = Counter()
        for w, n in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append((a, b))
        vocab.append(a + b)
        for w in words:
            s, out, i = seqs[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(vocab)}, f, ensure_ascii=False)
    with open(os.path.join(folder, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(f"{a} {b}\n")
    return len(vocab)


def tokenizer(folder, pad_token):
    tok = CLIPTokenizer(os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt"),
                        pad_token=pad_token, model_max_length=77)
    return tok


def scheduler():
    return DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                         clip_sample=False, set_alpha_to_one=False, steps_offset=1)


def vae():
    torch.manual_seed(1)
    return AutoencoderKL(block_out_channels=[32, 64], in_channels=3, out_channels=3,
                         down_block_types=["DownEncoderBlock2D"] * 2,
                         up_block_types=["UpDecoderBlock2D"] * 2, latent_channels=4,
                         layers_per_block=2, norm_num_groups=32, sample_size=32)


def text_config(vocab_size, act, eos, projection=None):
    return CLIPTextConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=37,
                          num_hidden_layers=3, num_attention_heads=4, max_position_embeddings=77,
                          hidden_act=act, layer_norm_eps=1e-5, bos_token_id=vocab_size - 2,
                          eos_token_id=eos, pad_token_id=1,
                          **({"projection_dim": projection} if projection else {}))


def build_sd1(out, vocab_folder, vocab_size):
    torch.manual_seed(0)
    unet = UNet2DConditionModel(block_out_channels=(32, 64), layers_per_block=2, sample_size=16,
                                in_channels=4, out_channels=4,
                                down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                                up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
                                cross_attention_dim=32, attention_head_dim=4)
    torch.manual_seed(2)
    te = CLIPTextModel(text_config(vocab_size, "quick_gelu", eos=2))
    pipe = StableDiffusionPipeline(unet=unet, vae=vae(), text_encoder=te,
                                   tokenizer=tokenizer(vocab_folder, "<|endoftext|>"),
                                   scheduler=scheduler(), safety_checker=None,
                                   feature_extractor=None, requires_safety_checker=False)
    pipe.save_pretrained(out, safe_serialization=True)
    return pipe


def build_sdxl(out, vocab_folder, vocab_size):
    torch.manual_seed(3)
    unet = UNet2DConditionModel(block_out_channels=(32, 64), layers_per_block=2, sample_size=16,
                                in_channels=4, out_channels=4,
                                down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                                up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
                                attention_head_dim=(2, 4), use_linear_projection=True,
                                addition_embed_type="text_time", addition_time_embed_dim=8,
                                transformer_layers_per_block=(1, 2),
                                projection_class_embeddings_input_dim=80, cross_attention_dim=64)
    torch.manual_seed(4)
    te = CLIPTextModel(text_config(vocab_size, "quick_gelu", eos=vocab_size - 1))
    torch.manual_seed(5)
    te2 = CLIPTextModelWithProjection(text_config(vocab_size, "gelu", eos=vocab_size - 1,
                                                  projection=32))
    pipe = StableDiffusionXLPipeline(unet=unet, vae=vae(), text_encoder=te, text_encoder_2=te2,
                                     tokenizer=tokenizer(vocab_folder, "<|endoftext|>"),
                                     tokenizer_2=tokenizer(vocab_folder, "!"),
                                     scheduler=scheduler())
    pipe.save_pretrained(out, safe_serialization=True)
    return pipe




PROMPTS = ["a photo of a cat", "sks style portrait, highly detailed",
           "an astronaut riding a horse on mars"]


@torch.no_grad()
def main(out):
    torch.set_num_threads(1)
    vocab_folder = os.path.join(out, "vocab")
    vocab_size = train_tiny_bpe(vocab_folder)
    cases = os.path.join(out, "cases")
    os.makedirs(cases, exist_ok=True)
    sd1 = build_sd1(os.path.join(out, "sd1"), vocab_folder, vocab_size)
    sdxl = build_sdxl(os.path.join(out, "sdxl"), vocab_folder, vocab_size)

    g = torch.Generator().manual_seed(42)
    sample = torch.randn(2, 4, 16, 16, generator=g)
    timestep = torch.tensor([10, 500])
    ctx = torch.randn(2, 7, 32, generator=g)
    save_case(cases, "sd1_unet",
              {"sample": sample, "timestep": timestep, "encoder_hidden_states": ctx},
              {"sample": sd1.unet(sample, timestep, ctx).sample})
    # A size that is not a multiple of the up factor exercises the upsample-size path.
    odd = torch.randn(1, 4, 10, 14, generator=g)
    save_case(cases, "sd1_unet_odd_size",
              {"sample": odd, "timestep": torch.tensor(999), "encoder_hidden_states": ctx[:1]},
              {"sample": sd1.unet(odd, torch.tensor(999), ctx[:1]).sample})
    ctx_xl = torch.randn(2, 7, 64, generator=g)
    text_embeds = torch.randn(2, 32, generator=g)
    time_ids = torch.tensor([[32.0, 32.0, 0.0, 0.0, 32.0, 32.0], [24.0, 40.0, 4.0, 0.0, 32.0, 32.0]])
    save_case(cases, "sdxl_unet",
              {"sample": sample, "timestep": timestep, "encoder_hidden_states": ctx_xl,
               "text_embeds": text_embeds, "time_ids": time_ids},
              {"sample": sdxl.unet(sample, timestep, ctx_xl,
                                   added_cond_kwargs={"text_embeds": text_embeds,
                                                      "time_ids": time_ids}).sample})
    image = torch.rand(2, 3, 32, 32, generator=g) * 2 - 1
    dist = sd1.vae.encode(image).latent_dist
    save_case(cases, "vae_encode", {"sample": image}, {"mean": dist.mean, "logvar": dist.logvar})
    latents = torch.randn(2, 4, 8, 8, generator=g)
    save_case(cases, "vae_decode", {"latents": latents},
              {"sample": sd1.vae.decode(latents).sample})

    for name, pipe, enc, tok in [("sd1_text_encoder", sd1, sd1.text_encoder, sd1.tokenizer),
                                 ("sdxl_text_encoder", sdxl, sdxl.text_encoder, sdxl.tokenizer),
                                 ("sdxl_text_encoder_2", sdxl, sdxl.text_encoder_2,
                                  sdxl.tokenizer_2)]:
        ids = tok(PROMPTS, padding="max_length", max_length=tok.model_max_length,
                  truncation=True, return_tensors="pt").input_ids
        o = enc(ids, output_hidden_states=True)
        expected = {"last_hidden_state": o.last_hidden_state,
                    "penultimate_hidden_state": o.hidden_states[-2]}
        if hasattr(o, "text_embeds") and o.text_embeds is not None:
            expected["text_embeds"] = o.text_embeds
        else:
            expected["pooler_output"] = o.pooler_output
        save_case(cases, name, {"input_ids": ids}, expected)

    # Schedulers: DDPM training math, DDIM and Euler steps.
    ddpm = DDPMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                         num_train_timesteps=1000, clip_sample=False)
    x0 = torch.randn(4, 4, 8, 8, generator=g)
    noise = torch.randn(4, 4, 8, 8, generator=g)
    t = torch.tensor([0, 1, 500, 999])
    ref = {"alphas_cumprod": ddpm.alphas_cumprod, "x0": x0, "noise": noise, "t": t,
           "add_noise": ddpm.add_noise(x0, noise, t), "velocity": ddpm.get_velocity(x0, noise, t)}
    for pred in ["epsilon", "v_prediction"]:
        ddim = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                             clip_sample=False, set_alpha_to_one=False, steps_offset=1,
                             prediction_type=pred)
        ddim.set_timesteps(10)
        ref[f"ddim_{pred}_timesteps"] = ddim.timesteps.clone()
        sample_t = torch.randn(1, 4, 8, 8, generator=g)
        ref[f"ddim_{pred}_start"] = sample_t.clone()
        outs = []
        for i, tt in enumerate(ddim.timesteps):
            mo = torch.randn(1, 4, 8, 8, generator=g)
            ref[f"ddim_{pred}_model_output_{i}"] = mo
            sample_t = ddim.step(mo, tt, sample_t).prev_sample
            outs.append(sample_t)
        ref[f"ddim_{pred}_samples"] = torch.stack(outs)
        euler = EulerDiscreteScheduler(beta_start=0.00085, beta_end=0.012,
                                       beta_schedule="scaled_linear", prediction_type=pred,
                                       timestep_spacing="linspace")
        euler.set_timesteps(12)
        ref[f"euler_{pred}_timesteps"] = euler.timesteps.clone()
        ref[f"euler_{pred}_sigmas"] = euler.sigmas.clone()
        ref[f"euler_{pred}_init_noise_sigma"] = torch.tensor(float(euler.init_noise_sigma))
        sample_e = torch.randn(1, 4, 8, 8, generator=g) * euler.init_noise_sigma
        ref[f"euler_{pred}_start"] = sample_e.clone()
        outs, scaled = [], []
        for i, tt in enumerate(euler.timesteps):
            scaled.append(euler.scale_model_input(sample_e, tt))
            mo = torch.randn(1, 4, 8, 8, generator=g)
            ref[f"euler_{pred}_model_output_{i}"] = mo
            sample_e = euler.step(mo, tt, sample_e).prev_sample
            outs.append(sample_e)
        ref[f"euler_{pred}_scaled"] = torch.stack(scaled)
        ref[f"euler_{pred}_samples"] = torch.stack(outs)
    save_file({k: v.contiguous() for k, v in ref.items()}, os.path.join(cases, "scheduler.safetensors"))
    t5, t5_tokenizer = t5_reference.build(out, cases)
    flux_reference.build(out, cases, sd1.text_encoder, sd1.tokenizer, t5, t5_tokenizer)
    optimizer_reference.build(out)
    single_file_reference.build(out, vocab_folder, vocab_size)
    quantization_reference.build(out)
    wan_reference.build(out, cases, t5_tokenizer)
    qwen_reference.build(out, cases)
    zimage_reference.build(out, cases, flux_reference.vae())
    qwen_reference.build_pipeline(out, cases)  # on zimage_reference's Qwen2 tokenizer
    qwen_edit_reference.build(out, cases)  # on both
    print(f"parity references written to {out}")


if __name__ == "__main__":
    main(sys.argv[1])
