"""Wan 2.1 references for loom's parity tests (issue 19): a tiny random WanTransformer3DModel made
with diffusers, never downloaded, and its outputs.

    build(out, cases) writes under OUT:
  wan/transformer/   the tiny transformer (Wan 2.1 text-to-video layout: no image embedder)
  cases/wan_transformer.*  its prediction for a 3-frame 8x6 latent clip and a 1-frame one, and
                     the gradient of a loss on it with respect to the clip (the backward path
                     loom trains through)
Everything is float32 on the CPU.
"""
import os

import torch

from reference_cases import save_case

from diffusers import WanTransformer3DModel

LATENT_CHANNELS = 4


def transformer():
    torch.manual_seed(19)
    # attention_head_dim 12: RoPE splits it as Wan does, 4 (frames) + 4 (height) + 4 (width).
    model = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2,
                                  attention_head_dim=12, in_channels=LATENT_CHANNELS,
                                  out_channels=LATENT_CHANNELS, text_dim=16, freq_dim=32,
                                  ffn_dim=40, num_layers=2, cross_attn_norm=True,
                                  qk_norm="rms_norm_across_heads", eps=1e-6,
                                  rope_max_seq_len=64).eval()
    # Norm weights start at one and biases at zero: move every parameter so each path matters.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model


def build(out, cases):
    model = transformer()
    model.save_pretrained(os.path.join(out, "wan", "transformer"), safe_serialization=True)
    g = torch.Generator().manual_seed(191)
    clip = torch.randn(2, LATENT_CHANNELS, 3, 8, 6, generator=g)
    text = torch.randn(2, 7, 16, generator=g)
    timestep = torch.tensor([999.0, 250.5])
    with torch.no_grad():
        sample = model(clip, timestep, text).sample
        still = model(clip[:, :, :1], timestep, text).sample
    with torch.enable_grad():  # make_reference.main runs under no_grad
        x = clip.clone().requires_grad_(True)
        model(x, timestep, text).sample.pow(2).mean().backward()
    save_case(cases, "wan_transformer",
              {"hidden_states": clip, "timestep": timestep, "encoder_hidden_states": text},
              {"sample": sample, "one_frame": still, "grad": x.grad})
