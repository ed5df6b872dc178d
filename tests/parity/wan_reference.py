"""Wan 2.1 references for loom's parity tests (issue 19): a tiny random WanTransformer3DModel made
with diffusers, never downloaded, and its outputs.

    build(out, cases) writes under OUT:
  wan/transformer/   the tiny transformer (Wan 2.1 text-to-video layout: no image embedder)
  cases/wan_transformer.*  its prediction for a 3-frame 8x6 latent clip and a 1-frame one, and
                     the gradient of a loss on it with respect to the clip (the backward path
                     loom trains through)
  wan/vae/           a tiny AutoencoderKLWan (Wan 2.1 layout: 4x in time, 8x in space)
  wan/pipeline/      a tiny WanPipeline folder (its own transformer with UMT5's width, the VAE above,
                     the tiny UMT5 of t5_reference.py and its tokenizer, ai-toolkit's
                     FlowMatchEuler scheduler with shift 3)
  cases/wan_pipeline.*  the pipeline's prompt embeddings (trimmed, zero-padded to 512) and the
                     clips it samples with classifier-free guidance, one frame and five
  wan22/pipeline/    a tiny Wan 2.2 14B WanPipeline folder: two experts (transformer, the high-noise
                     one, and transformer_2) with boundary_ratio 0.875 over the pipeline's VAE and
                     UMT5
  cases/wan22_pipeline.*  each expert's prediction for a batch with one timestep on each side of
                     the boundary, and the clips the pipeline samples through both experts
  cases/wan_vae.*    its latent distribution for a 9-frame 16x24 clip (three chunks, so every
                     causal cache is used) and a one-frame image, the decoding of 3 latent
                     frames, and the pipeline's latent normalisation
Everything is float32 on the CPU.
"""
import os

import torch

from reference_cases import save_case

from diffusers import (AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, WanPipeline,
                       WanTransformer3DModel)

LATENT_CHANNELS = 4


def transformer(text_dim=16, seed=19):
    torch.manual_seed(seed)
    # attention_head_dim 12: RoPE splits it as Wan does, 4 (frames) + 4 (height) + 4 (width).
    model = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2,
                                  attention_head_dim=12, in_channels=LATENT_CHANNELS,
                                  out_channels=LATENT_CHANNELS, text_dim=text_dim, freq_dim=32,
                                  ffn_dim=40, num_layers=2, cross_attn_norm=True,
                                  qk_norm="rms_norm_across_heads", eps=1e-6,
                                  rope_max_seq_len=64).eval()
    # Norm weights start at one and biases at zero: move every parameter so each path matters.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model


def vae():
    torch.manual_seed(23)
    model = AutoencoderKLWan(base_dim=8, z_dim=LATENT_CHANNELS, dim_mult=[1, 2, 2, 2],
                             num_res_blocks=1, temperal_downsample=[False, True, True],
                             latents_mean=[0.3, -0.2, 0.1, -0.5],
                             latents_std=[1.5, 0.7, 2.0, 1.1]).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def build_vae(out, cases):
    model = vae()
    model.save_pretrained(os.path.join(out, "wan", "vae"), safe_serialization=True)
    g = torch.Generator().manual_seed(231)
    clip = torch.rand(2, 3, 9, 16, 24, generator=g) * 2 - 1
    image = clip[:1, :, :1].clone()
    latents = torch.randn(2, LATENT_CHANNELS, 3, 2, 3, generator=g)
    dist = model.encode(clip).latent_dist
    still = model.encode(image).latent_dist
    decoded = model.decode(latents).sample
    # WanPipeline's normalisation (and ai-toolkit's): (z - mean) * (1 / std).
    mean = torch.tensor(model.config.latents_mean).view(1, -1, 1, 1, 1)
    inv_std = 1.0 / torch.tensor(model.config.latents_std).view(1, -1, 1, 1, 1)
    save_case(cases, "wan_vae",
              {"clip": clip, "image": image, "latents": latents},
              {"mean": dist.mean, "logvar": dist.logvar, "image_mean": still.mean,
               "image_logvar": still.logvar, "decoded": decoded,
               "normalized": (latents - mean) * inv_std})


PROMPTS = ["  a photo of  a sks dog &amp; a cat\n", "an astronaut riding a horse"]
NEGATIVES = ["blurry", ""]


def sample_clips(pipe, inputs, expected):
    """The pipeline's clips of 1 and 5 frames for PROMPTS in 4 guided steps, from each prompt's
    own seed (7, 8), into inputs (noise_F) and expected (latents_F, clip_F)."""
    for frames in (1, 5):
        # As prepare_latents draws it from torch.Generator().manual_seed(seed), one per prompt.
        noise = torch.cat([torch.randn(1, LATENT_CHANNELS, (frames - 1) // 4 + 1, 2, 4,
                                       generator=torch.Generator().manual_seed(seed))
                           for seed in (7, 8)])
        latents = pipe(prompt=PROMPTS, negative_prompt=NEGATIVES, height=16, width=32,
                       num_frames=frames, num_inference_steps=4, guidance_scale=4.0,
                       latents=noise.clone(), output_type="latent").frames
        # The pipeline's decoding, before its conversion to pictures.
        mean = torch.tensor(pipe.vae.config.latents_mean).view(1, -1, 1, 1, 1)
        inv_std = 1.0 / torch.tensor(pipe.vae.config.latents_std).view(1, -1, 1, 1, 1)
        inputs[f"noise_{frames}"] = noise
        expected[f"latents_{frames}"] = latents
        expected[f"clip_{frames}"] = pipe.vae.decode(latents / inv_std + mean).sample


def build_pipeline(out, cases, tokenizer):
    from transformers import UMT5EncoderModel

    text_encoder = UMT5EncoderModel.from_pretrained(os.path.join(out, "umt5")).eval()
    pipe = WanPipeline(tokenizer=tokenizer, text_encoder=text_encoder,
                       transformer=transformer(text_dim=text_encoder.config.d_model, seed=29),
                       vae=vae(), scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0))
    pipe.save_pretrained(os.path.join(out, "wan", "pipeline"), safe_serialization=True)
    embeds, _ = pipe.encode_prompt(PROMPTS, do_classifier_free_guidance=False,
                                   max_sequence_length=512)
    expected = {"prompt_embeds": embeds}
    inputs = {}
    sample_clips(pipe, inputs, expected)
    save_case(cases, "wan_pipeline", inputs, expected)


def build_wan22(out, cases, tokenizer):
    """Wan 2.2 14B's layout: WanPipeline with transformer_2 and boundary_ratio (diffusers'
    pipeline_wan.py: the high-noise `transformer` for t >= boundary, `transformer_2` below)."""
    from transformers import UMT5EncoderModel

    text_encoder = UMT5EncoderModel.from_pretrained(os.path.join(out, "umt5")).eval()
    width = text_encoder.config.d_model
    pipe = WanPipeline(tokenizer=tokenizer, text_encoder=text_encoder,
                       transformer=transformer(text_dim=width, seed=37),
                       transformer_2=transformer(text_dim=width, seed=41),
                       vae=vae(), scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
                       boundary_ratio=0.875)
    pipe.save_pretrained(os.path.join(out, "wan22", "pipeline"), safe_serialization=True)
    g = torch.Generator().manual_seed(221)
    clip = torch.randn(2, LATENT_CHANNELS, 2, 4, 6, generator=g)
    text = torch.randn(2, 5, width, generator=g)
    timestep = torch.tensor([950.0, 300.0])  # one above the boundary (875), one below
    expected = {"high": pipe.transformer(clip, timestep, text).sample,
                "low": pipe.transformer_2(clip, timestep, text).sample}
    inputs = {"hidden_states": clip, "timestep": timestep, "encoder_hidden_states": text}
    # 4 steps at shift 3: t = 1000 (the high-noise expert), then about 858, 602, 9 (low-noise).
    sample_clips(pipe, inputs, expected)
    save_case(cases, "wan22_pipeline", inputs, expected)


def build(out, cases, tokenizer):
    build_vae(out, cases)
    build_pipeline(out, cases, tokenizer)
    build_wan22(out, cases, tokenizer)
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
