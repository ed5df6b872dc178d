"""Flux.1 references for loom's parity tests (issue 18): a tiny random FluxPipeline folder made
with diffusers and transformers, never downloaded, and reference outputs of its parts.

Called by make_reference.py with the tiny CLIP text encoder/tokenizer and the tiny T5 encoder/
tokenizer it built. Writes under OUT:
  flux/          a FluxPipeline folder (dev: the transformer has a guidance embedding; the VAE has
                 16 latent channels, a shift_factor and no quant convs; Flux dev's scheduler config)
  flux_schnell/transformer/  the same transformer shape without the guidance embedding
  flux_kontext/  a FluxKontextPipeline folder (issue 40): dev's shape, its own weights
  cases/flux_transformer.*, flux_schnell_transformer.*, flux_vae_encode.*, flux_vae_decode.*,
  flux_packing.* (latent packing and position ids as FluxPipeline does them)
  cases/flow_match.safetensors: flow-matching schedules, Euler steps and training timesteps
  cases/flux_prompts.*: FluxPipeline.encode_prompt of three prompts (the prompts in .json)
  cases/flux_pipeline.*: FluxPipeline's images for two seeded prompts (the settings in .json)
  cases/flux_kontext_predict.*: ai-toolkit's Kontext prediction (control latents joined on the
                 sequence, ids marked 1, the output trimmed to the target's tokens)
  cases/flux_kontext_pipeline.*: FluxKontextPipeline's images for two prompts with control images
  chroma/        a ChromaPipeline folder (issue 40): a ChromaTransformer2DModel (Flux's blocks
                 without their modulation Linears, fed by the distilled-guidance approximator),
                 Flux's tiny VAE, the tiny T5 and its tokenizer, Flux dev's scheduler config
  cases/chroma_transformer.*: its prediction with ChromaPipeline's attention mask (T5's tokens
                 up to the first padding one, every image token)
  cases/chroma_prompts.*: ChromaPipeline.encode_prompt of three prompts (T5 under the tokenizer
                 mask, and the text mask it returns)
  cases/chroma_pipeline.*: ChromaPipeline's images for two seeded prompts with a negative prompt
                 and real classifier-free guidance (the settings in .json)
  flex2/         a FluxPipeline folder of Flex.2's shape (issue 40): the transformer takes 196
                 channels (latents, inpaint latent, mask, control latent; packed) and gives 64
  cases/flex2_predict.*: ai-toolkit's Flex.2 prediction (Flex2.condition_noisy_latents, then
                 get_noise_prediction): with an inpaint image's mask, a control latent and the
                 guidance embedding bypassed; without an inpaint image, with the control and the
                 bypass; and without either at guidance 1
Everything is float32 on the CPU.
"""
import json
import os

import torch
from safetensors.torch import save_file

from reference_cases import save_case

from diffusers import (AutoencoderKL, ChromaPipeline, ChromaTransformer2DModel,
                       FlowMatchEulerDiscreteScheduler,
                       FluxKontextPipeline, FluxPipeline, FluxTransformer2DModel)

LATENT_CHANNELS = 16
PROMPT_TOKENS = 32  # max_sequence_length of the prompt case (512 for dev, 256 for schnell)


def transformer(guidance, seed):
    torch.manual_seed(seed)
    model = FluxTransformer2DModel(patch_size=1, in_channels=4 * LATENT_CHANNELS, num_layers=2,
                                   num_single_layers=2, attention_head_dim=16,
                                   num_attention_heads=2, joint_attention_dim=32,
                                   pooled_projection_dim=32, guidance_embeds=guidance,
                                   axes_dims_rope=(4, 6, 6)).eval()
    # diffusers zero-initialises nothing here, but scale up so every path matters.
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2.0)
    return model


def vae():
    torch.manual_seed(21)
    return AutoencoderKL(block_out_channels=[32, 64], in_channels=3, out_channels=3,
                         down_block_types=["DownEncoderBlock2D"] * 2,
                         up_block_types=["UpDecoderBlock2D"] * 2,
                         latent_channels=LATENT_CHANNELS, layers_per_block=1, norm_num_groups=32,
                         sample_size=32, use_quant_conv=False, use_post_quant_conv=False,
                         shift_factor=0.1159, scaling_factor=0.3611).eval()


def scheduler():
    # FLUX.1-dev's scheduler/scheduler_config.json
    return FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0,
                                           use_dynamic_shifting=True, base_shift=0.5,
                                           max_shift=1.15, base_image_seq_len=256,
                                           max_image_seq_len=4096)




@torch.no_grad()
def build(out, cases, clip_encoder, clip_tokenizer, t5_encoder, t5_tokenizer):
    dev = transformer(guidance=True, seed=30)
    pipe = FluxPipeline(scheduler=scheduler(), vae=vae(), text_encoder=clip_encoder,
                        tokenizer=clip_tokenizer, text_encoder_2=t5_encoder,
                        tokenizer_2=t5_tokenizer, transformer=dev)
    pipe.save_pretrained(os.path.join(out, "flux"), safe_serialization=True)
    schnell = transformer(guidance=False, seed=31)
    schnell.save_pretrained(os.path.join(out, "flux_schnell", "transformer"),
                            safe_serialization=True)

    g = torch.Generator().manual_seed(18)
    height, width = 8, 12  # latent pixels: 4 x 6 packed tokens
    latents = torch.randn(2, LATENT_CHANNELS, height, width, generator=g)
    packed = FluxPipeline._pack_latents(latents, 2, LATENT_CHANNELS, height, width)
    img_ids = FluxPipeline._prepare_latent_image_ids(2, height // 2, width // 2, "cpu",
                                                     torch.float32)
    unpacked = FluxPipeline._unpack_latents(packed, height * pipe.vae_scale_factor,
                                            width * pipe.vae_scale_factor, pipe.vae_scale_factor)
    save_case(cases, "flux_packing", {"latents": latents},
              {"packed": packed, "img_ids": img_ids, "unpacked": unpacked})

    text = torch.randn(2, 7, 32, generator=g)
    pooled = torch.randn(2, 32, generator=g)
    txt_ids = torch.zeros(7, 3)
    timestep = torch.tensor([0.3, 0.95])
    guidance = torch.tensor([3.5, 1.0])
    inputs = {"hidden_states": packed, "encoder_hidden_states": text, "pooled_projections": pooled,
              "timestep": timestep, "img_ids": img_ids, "txt_ids": txt_ids}
    save_case(cases, "flux_transformer", dict(inputs, guidance=guidance),
              {"sample": dev(guidance=guidance, **inputs).sample})
    save_case(cases, "flux_schnell_transformer", inputs, {"sample": schnell(**inputs).sample})

    image = torch.rand(2, 3, 32, 32, generator=g) * 2 - 1
    dist = pipe.vae.encode(image).latent_dist
    save_case(cases, "flux_vae_encode", {"sample": image},
              {"mean": dist.mean, "logvar": dist.logvar})
    z = torch.randn(2, LATENT_CHANNELS, 8, 8, generator=g)
    save_case(cases, "flux_vae_decode", {"latents": z}, {"sample": pipe.vae.decode(z).sample})
    build_scheduler_case(cases)

    # The pipeline's prompt encoding: T5 (max_sequence_length tokens) and CLIP's pooled output.
    prompts = ["a photo of a cat", "sks style portrait, highly detailed, " * 4, ""]
    embeds, pooled, _ = pipe.encode_prompt(prompt=prompts, prompt_2=None,
                                           max_sequence_length=PROMPT_TOKENS)
    save_case(cases, "flux_prompts", {}, {"prompt_embeds": embeds, "pooled_prompt_embeds": pooled})
    with open(os.path.join(cases, "flux_prompts.json"), "w") as f:
        json.dump({"prompts": prompts, "max_sequence_length": PROMPT_TOKENS}, f)

    # The whole pipeline: seeded noise, 3 Euler steps with the dynamic shift, guidance 3.5,
    # decoded to [0, 1] (output_type="pt"). 16x24 pixels: 8x12 latents with the tiny VAE.
    seeds = [5, 6]
    images = pipe(prompt=prompts[:2], height=16, width=24, num_inference_steps=3,
                  guidance_scale=3.5, max_sequence_length=PROMPT_TOKENS, output_type="pt",
                  generator=[torch.Generator().manual_seed(s) for s in seeds]).images
    save_case(cases, "flux_pipeline", {}, {"images": images})
    with open(os.path.join(cases, "flux_pipeline.json"), "w") as f:
        json.dump({"prompts": prompts[:2], "seeds": seeds, "height": 16, "width": 24, "steps": 3,
                   "guidance": 3.5, "max_sequence_length": PROMPT_TOKENS}, f)
    build_kontext(out, cases, pipe, prompts[:2])
    build_chroma(out, cases, pipe, prompts)
    build_flex2(out, cases, pipe)


def chroma_mask(lengths, tokens, image_tokens):
    """ChromaPipeline's attention mask: T5's tokens up to and including the first padding one
    (_get_t5_prompt_embeds), then every image token (_prepare_attention_mask), as float32: the
    pipeline's dtype, which the transformer's attention adds to its scores."""
    index = torch.arange(tokens).unsqueeze(0)
    text = (index <= torch.tensor(lengths).unsqueeze(1)).to(torch.float32)
    return torch.cat([text, torch.ones(len(lengths), image_tokens)], dim=1)


@torch.no_grad()
def build_chroma(out, cases, flux, prompts):
    chroma = ChromaPipeline(scheduler=scheduler(), vae=flux.vae, text_encoder=flux.text_encoder_2,
                            tokenizer=flux.tokenizer_2, transformer=chroma_transformer())
    chroma.save_pretrained(os.path.join(out, "chroma"), safe_serialization=True)
    build_chroma_transformer_case(chroma.transformer, cases)

    embeds, _, mask, _, _, _ = chroma.encode_prompt(prompt=prompts,
                                                    do_classifier_free_guidance=False,
                                                    max_sequence_length=PROMPT_TOKENS)
    save_case(cases, "chroma_prompts", {}, {"prompt_embeds": embeds, "attention_mask": mask})
    with open(os.path.join(cases, "chroma_prompts.json"), "w") as f:
        json.dump({"prompts": prompts, "max_sequence_length": PROMPT_TOKENS}, f)

    # The whole pipeline with a negative prompt and guidance 4 (two transformer passes a step),
    # 16x24 pixels, 3 steps, decoded to [0, 1].
    seeds = [12, 13]
    negative = "blurry, low quality"
    images = chroma(prompt=prompts[:2], negative_prompt=[negative, negative], height=16, width=24,
                    num_inference_steps=3, guidance_scale=4.0, max_sequence_length=PROMPT_TOKENS,
                    output_type="pt",
                    generator=[torch.Generator().manual_seed(s) for s in seeds]).images
    save_case(cases, "chroma_pipeline", {}, {"images": images})
    with open(os.path.join(cases, "chroma_pipeline.json"), "w") as f:
        json.dump({"prompts": prompts[:2], "negative": negative, "seeds": seeds, "height": 16,
                   "width": 24, "steps": 3, "guidance": 4.0,
                   "max_sequence_length": PROMPT_TOKENS}, f)


def chroma_transformer():
    torch.manual_seed(33)
    model = ChromaTransformer2DModel(patch_size=1, in_channels=4 * LATENT_CHANNELS, num_layers=2,
                                     num_single_layers=2, attention_head_dim=16,
                                     num_attention_heads=2, joint_attention_dim=32,
                                     axes_dims_rope=(4, 6, 6), approximator_num_channels=64,
                                     approximator_hidden_dim=48, approximator_layers=2).eval()
    for p in model.parameters():
        p.mul_(2.0)
    return model


def build_chroma_transformer_case(model, cases):
    g = torch.Generator().manual_seed(41)
    h, w, tokens = 8, 12, 9
    hidden = torch.randn(2, (h // 2) * (w // 2), 4 * LATENT_CHANNELS, generator=g)
    context = torch.randn(2, tokens, 32, generator=g)
    img_ids = FluxPipeline._prepare_latent_image_ids(2, h // 2, w // 2, "cpu", torch.float32)
    mask = chroma_mask([3, 6], tokens, hidden.shape[1])
    inputs = {"hidden_states": hidden, "encoder_hidden_states": context,
              "timestep": torch.tensor([0.3, 0.95]), "img_ids": img_ids,
              "txt_ids": torch.zeros(tokens, 3), "attention_mask": mask}
    save_case(cases, "chroma_transformer", inputs, {"sample": model(**inputs).sample})


def flex2_prediction(model, noisy, control, context, pooled, timesteps, bypass, x0=None,
                     keep=None):
    """ai-toolkit's Flex.2 step (extensions_built_in/flex2/flex2.py; ai-toolkit is not on PyPI):
    condition_noisy_latents without an inpaint image (zeros and a mask of ones, "inpaint
    everything") and with `control` latents (zeros when None) on the channels, then
    get_noise_prediction: packed, guidance 1, and with `bypass` the guidance embedding left out
    as toolkit/models/flux.py's bypass_flux_guidance does (timestep and pooled text only)."""
    b, c, h, w = noisy.shape
    if keep is None:
        inpaint = torch.cat((torch.zeros_like(noisy), torch.ones_like(noisy[:, :1])), dim=1)
    else:
        # An RGBA inpaint image's alpha (1 keep, 0 inpaint) at the image's size: resized to the
        # latents bilinearly, the clean latents masked by it, then inverted to the inpaint mask
        # (no random blur, inversion or dilation: those draws are ai-toolkit's).
        mask = torch.nn.functional.interpolate(keep, size=(h, w), mode="bilinear")
        inpaint = torch.cat((x0 * mask, 1 - mask), dim=1)
    ctrl = torch.zeros_like(noisy) if control is None else control
    latents = torch.cat((noisy, torch.cat((inpaint, ctrl), dim=1)), dim=1)
    packed = FluxPipeline._pack_latents(latents, b, latents.shape[1], h, w)
    img_ids = FluxPipeline._prepare_latent_image_ids(b, h // 2, w // 2, "cpu", torch.float32)
    embed = model.time_text_embed
    original = embed.forward
    if bypass:
        def bypass_forward(timestep, guidance, pooled_projection):
            t = embed.timestep_embedder(embed.time_proj(timestep).to(pooled_projection.dtype))
            return t + embed.text_embedder(pooled_projection)
        embed.forward = bypass_forward
    try:
        out = model(hidden_states=packed, encoder_hidden_states=context, pooled_projections=pooled,
                    timestep=timesteps / 1000, img_ids=img_ids,
                    txt_ids=torch.zeros(context.shape[1], 3), guidance=torch.ones(b)).sample
    finally:
        embed.forward = original
    return out.view(b, h // 2, w // 2, c, 2, 2).permute(0, 3, 1, 4, 2, 5).reshape(b, c, h, w)


@torch.no_grad()
def build_flex2(out, cases, flux):
    torch.manual_seed(34)
    model = FluxTransformer2DModel(patch_size=1, in_channels=4 * (3 * LATENT_CHANNELS + 1),
                                   out_channels=4 * LATENT_CHANNELS, num_layers=2,
                                   num_single_layers=2, attention_head_dim=16,
                                   num_attention_heads=2, joint_attention_dim=32,
                                   pooled_projection_dim=32, guidance_embeds=True,
                                   axes_dims_rope=(4, 6, 6)).eval()
    for p in model.parameters():
        p.mul_(2.0)
    flex2 = FluxPipeline(scheduler=scheduler(), vae=flux.vae, text_encoder=flux.text_encoder,
                         tokenizer=flux.tokenizer, text_encoder_2=flux.text_encoder_2,
                         tokenizer_2=flux.tokenizer_2, transformer=model)
    flex2.save_pretrained(os.path.join(out, "flex2"), safe_serialization=True)

    g = torch.Generator().manual_seed(42)
    noisy = torch.randn(2, LATENT_CHANNELS, 8, 12, generator=g)
    control = torch.randn(2, LATENT_CHANNELS, 8, 12, generator=g)
    text = torch.randn(2, 7, 32, generator=g)
    pooled = torch.randn(2, 32, generator=g)
    timesteps = torch.tensor([300.0, 950.0])
    x0 = torch.randn(2, LATENT_CHANNELS, 8, 12, generator=g)
    # A keep mask at the image's size (16x24 pixels): a hard edge and a soft ramp.
    keep = torch.ones(2, 1, 16, 24)
    keep[0, :, 4:12, 6:18] = 0
    keep[1] = torch.linspace(0, 1, 24).expand(16, 24)
    inputs = {"noisy": noisy, "control": control, "context": text, "pooled": pooled,
              "timesteps": timesteps, "x0": x0, "keep": keep}
    save_case(cases, "flex2_predict", inputs, {
        "bypassed_with_inpaint_and_control": flex2_prediction(
            model, noisy, control, text, pooled, timesteps, bypass=True, x0=x0, keep=keep),
        "bypassed_with_control": flex2_prediction(model, noisy, control, text, pooled, timesteps,
                                                  bypass=True),
        "guided_without_control": flex2_prediction(model, noisy, None, text, pooled, timesteps,
                                                   bypass=False)})


def kontext_prediction(model, noisy, control, context, pooled, timesteps):
    """ai-toolkit's FluxKontextModel.get_noise_prediction (extensions_built_in/
    diffusion_models/flux_kontext/flux_kontext.py): both latents packed, the control after the
    target on the sequence with its ids' first axis 1, guidance 1, the output trimmed to the
    target's tokens and unpacked."""
    b, c, h, w = noisy.shape
    packed = FluxPipeline._pack_latents(noisy, b, c, h, w)
    packed_control = FluxPipeline._pack_latents(control, b, c, control.shape[2], control.shape[3])
    img_ids = FluxPipeline._prepare_latent_image_ids(b, h // 2, w // 2, "cpu", torch.float32)
    ctrl_ids = FluxPipeline._prepare_latent_image_ids(b, control.shape[2] // 2,
                                                      control.shape[3] // 2, "cpu", torch.float32)
    ctrl_ids[..., 0] = 1
    out = model(hidden_states=torch.cat([packed, packed_control], dim=1),
                encoder_hidden_states=context, pooled_projections=pooled,
                timestep=timesteps / 1000, img_ids=torch.cat([img_ids, ctrl_ids], dim=0),
                txt_ids=torch.zeros(context.shape[1], 3), guidance=torch.ones(b)).sample
    out = out[:, :packed.shape[1]]
    return out.view(b, h // 2, w // 2, c, 2, 2).permute(0, 3, 1, 4, 2, 5).reshape(b, c, h, w)


@torch.no_grad()
def build_kontext(out, cases, flux, prompts):
    kontext = FluxKontextPipeline(scheduler=scheduler(), vae=flux.vae,
                                  text_encoder=flux.text_encoder, tokenizer=flux.tokenizer,
                                  text_encoder_2=flux.text_encoder_2, tokenizer_2=flux.tokenizer_2,
                                  transformer=transformer(guidance=True, seed=32))
    kontext.save_pretrained(os.path.join(out, "flux_kontext"), safe_serialization=True)

    g = torch.Generator().manual_seed(40)
    noisy = torch.randn(2, LATENT_CHANNELS, 8, 12, generator=g)
    control = torch.randn(2, LATENT_CHANNELS, 8, 12, generator=g)
    text = torch.randn(2, 7, 32, generator=g)
    pooled = torch.randn(2, 32, generator=g)
    timesteps = torch.tensor([300.0, 950.0])
    inputs = {"noisy": noisy, "control": control, "context": text, "pooled": pooled,
              "timesteps": timesteps}
    save_case(cases, "flux_kontext_predict", inputs,
              {"prediction": kontext_prediction(kontext.transformer, **inputs)})

    # The pipeline with a control image per prompt at the output size ([0, 1] pixels, which the
    # image processor maps to [-1, 1]); _auto_resize off so the control keeps that size, and
    # max_area that size's area, else the pipeline rescales the output to a megapixel.
    seeds = [8, 9]
    controls = torch.rand(2, 3, 16, 24, generator=g)
    images = kontext(image=controls, prompt=prompts, height=16, width=24, num_inference_steps=3,
                     guidance_scale=3.5, max_sequence_length=PROMPT_TOKENS, output_type="pt",
                     _auto_resize=False, max_area=16 * 24,
                     generator=[torch.Generator().manual_seed(s) for s in seeds]).images
    assert images.shape == (2, 3, 16, 24), images.shape
    save_case(cases, "flux_kontext_pipeline", {"controls": controls}, {"images": images})
    with open(os.path.join(cases, "flux_kontext_pipeline.json"), "w") as f:
        json.dump({"prompts": prompts, "seeds": seeds, "height": 16, "width": 24, "steps": 3,
                   "guidance": 3.5, "max_sequence_length": PROMPT_TOKENS}, f)


def toolkit_shift_timesteps(sched, image_seq_len):
    """ai-toolkit's set_train_timesteps(1000, timestep_type="shift") on a diffusers scheduler
    (toolkit/samplers/custom_flowmatch_sampler.py; ai-toolkit is not on PyPI)."""
    import numpy as np
    timesteps = np.linspace(sched._sigma_to_t(sched.sigma_max), sched._sigma_to_t(sched.sigma_min),
                            1000)
    sigmas = timesteps / sched.config.num_train_timesteps
    if sched.config.use_dynamic_shifting:
        c = sched.config
        m = (c.max_shift - c.base_shift) / (c.max_image_seq_len - c.base_image_seq_len)
        mu = image_seq_len * m + (c.base_shift - m * c.base_image_seq_len)
        sigmas = sched.time_shift(mu, 1.0, sigmas)
    else:
        sigmas = sched.shift * sigmas / (1 + (sched.shift - 1) * sigmas)
    return torch.from_numpy(sigmas).to(torch.float32) * sched.config.num_train_timesteps


@torch.no_grad()
def build_scheduler_case(cases):
    """Flow matching: the Flux pipeline's preview schedule and Euler steps for dev (dynamic
    shift) and schnell (static shift 1) and a static shift of 3; ai-toolkit's training timestep
    tables (linear, shift) and its noising."""
    import numpy as np
    from diffusers.pipelines.flux.pipeline_flux import calculate_shift
    g = torch.Generator().manual_seed(7)
    ref = {}
    configs = {"dev": scheduler(),
               "schnell": FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=1.0,
                                                           use_dynamic_shifting=False),
               "static3": FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0,
                                                           use_dynamic_shifting=False)}
    for name, sched in configs.items():
        for steps, seq in [(4, 24), (28, 4096), (20, 1024)]:
            sigmas = np.linspace(1.0, 1 / steps, steps)
            mu = calculate_shift(seq, sched.config.get("base_image_seq_len", 256),
                                 sched.config.get("max_image_seq_len", 4096),
                                 sched.config.get("base_shift", 0.5),
                                 sched.config.get("max_shift", 1.15))
            sched.set_timesteps(sigmas=sigmas, mu=mu)
            key = f"{name}_{steps}_{seq}"
            ref[key + "_sigmas"] = sched.sigmas.clone()
            ref[key + "_timesteps"] = sched.timesteps.clone()
            if steps == 4:
                x = torch.randn(1, 24, 64, generator=g)
                ref[key + "_start"] = x.clone()
                outs = []
                for i, t in enumerate(sched.timesteps):
                    v = torch.randn(1, 24, 64, generator=g)
                    ref[key + f"_output_{i}"] = v
                    x = sched.step(v, t, x).prev_sample
                    outs.append(x)
                ref[key + "_samples"] = torch.stack(outs)
        fresh = type(sched).from_config(sched.config)
        ref[f"{name}_train_shift_24"] = toolkit_shift_timesteps(fresh, 24)
        ref[f"{name}_train_shift_4096"] = toolkit_shift_timesteps(fresh, 4096)
    # WanPipeline's schedule: set_timesteps(steps) without sigmas, the scheduler's own spacing.
    for shift in (3.0, 5.0):
        for steps in (2, 4, 30, 50):
            sched = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=shift,
                                                    use_dynamic_shifting=False)
            sched.set_timesteps(steps)
            key = f"spaced_{int(shift)}_{steps}"
            ref[key + "_sigmas"] = sched.sigmas.clone()
            ref[key + "_timesteps"] = sched.timesteps.clone()
    ref["train_linear"] = torch.linspace(1000, 1, 1000)
    x0 = torch.randn(3, 16, 4, 6, generator=g)
    noise = torch.randn(3, 16, 4, 6, generator=g)
    t = torch.tensor([1000.0, 500.0, 1.0])
    t01 = (t / 1000).view(3, 1, 1, 1)
    ref.update({"x0": x0, "noise": noise, "t": t, "noisy": (1.0 - t01) * x0 + t01 * noise,
                "target": noise - x0})
    save_file({k: v.contiguous() for k, v in ref.items()},
              os.path.join(cases, "flow_match.safetensors"))
