"""Qwen-family text-encoder references for loom's parity tests (issues 41 and 42): tiny random
language models made here with transformers, never downloaded.

Called by make_reference.py. Writes under OUT:
  qwen2_5_vl/  a Qwen2_5_VLForConditionalGeneration folder (config.json, model.safetensors) as
               Qwen-Image's text_encoder is one: the language model with q/k/v biases and the
               multimodal rotary embedding, a tiny vision tower and the LM head beside it;
  qwen3/       a Qwen3ForCausalLM folder, as Z-Image's text_encoder: q_norm / k_norm, no biases,
               a head size that is not hidden_size / heads;
  qwenimage_transformer/  a tiny QwenImageTransformer2DModel (2 dual-stream blocks, heads of 16,
               MSRoPE axes (4, 6, 6)) as Qwen-Image's transformer folder;
  qwenimage_vae/  a tiny AutoencoderKLQwenImage (Wan 2.1's VAE layout, its own config keys) and
               cases/qwenimage_vae.*: an image encoded (a one-frame clip, as QwenImagePipeline
               encodes) and latents decoded;
and cases/decoder_lm_<name>.{inputs,expected}.safetensors: right-padded batches of ids with
their attention mask as the pipelines pass them, and hidden_states[-1] (Qwen-Image) and
hidden_states[-2] (Z-Image) of the text model; for Qwen2.5-VL also a run with three different
position rows (time, height, width), as an image's tokens have them.
"""
import json
import os

import torch

from reference_cases import save_case

VOCAB = 300


def perturb_(model, generator, scale=0.2):
    """Random weights of a useful size (transformers' init makes norms exactly one)."""
    for p in model.parameters():
        p.copy_(torch.randn(p.shape, generator=generator) * scale)
    for name, p in model.named_parameters():
        if "norm" in name:
            p.copy_(1.0 + torch.randn(p.shape, generator=generator) * 0.1)


def batch(generator):
    """Two right-padded prompts of 11 and 7 tokens, as the tokenizer pads a batch."""
    ids = torch.randint(0, VOCAB, (2, 11), generator=generator)
    mask = torch.ones(2, 11, dtype=torch.long)
    mask[1, 7:] = 0
    ids[1, 7:] = 0
    return ids, mask


def build_qwen2_5_vl(out, cases, g):
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    config = Qwen2_5_VLConfig(
        text_config=dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=56,
                         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                         rms_norm_eps=1e-6, max_position_embeddings=512,
                         bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                          "mrope_section": [1, 1, 2]}),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=24, num_heads=2,
                           out_hidden_size=32, patch_size=14, spatial_merge_size=2,
                           temporal_patch_size=2, fullatt_block_indexes=[0]),
        image_token_id=VOCAB - 5, video_token_id=VOCAB - 4, vision_start_token_id=VOCAB - 3,
        vision_end_token_id=VOCAB - 2)
    model = Qwen2_5_VLForConditionalGeneration(config).eval()
    perturb_(model, g)
    model.save_pretrained(os.path.join(out, "qwen2_5_vl"), safe_serialization=True)
    ids, mask = batch(g)
    # As QwenImagePipeline calls it.
    states = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    # Three position rows that differ, as an image's tokens have them (the language model alone:
    # position ids given, so no rope index is computed from the ids).
    positions = torch.stack([torch.arange(11), torch.arange(11) // 3, torch.arange(11) % 3 + 2])
    positions = positions.unsqueeze(1).expand(3, 2, 11).contiguous()
    embeds = model.model.language_model.embed_tokens(ids)
    rows = model.model.language_model(inputs_embeds=embeds, attention_mask=mask,
                                      position_ids=positions).last_hidden_state
    save_case(cases, "decoder_lm_qwen2_5_vl",
              {"input_ids": ids, "attention_mask": mask, "position_ids": positions},
              {"last": states[-1], "second_to_last": states[-2], "embeddings": states[0],
               "three_rows": rows})


def build_qwen3(out, cases, g):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=48,
                         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=12, rms_norm_eps=1e-6, max_position_embeddings=512,
                         bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                         tie_word_embeddings=True)
    model = Qwen3ForCausalLM(config).eval()
    perturb_(model, g)
    model.save_pretrained(os.path.join(out, "qwen3"), safe_serialization=True)
    ids, mask = batch(g)
    # As ZImagePipeline calls it.
    states = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    save_case(cases, "decoder_lm_qwen3", {"input_ids": ids, "attention_mask": mask},
              {"last": states[-1], "second_to_last": states[-2], "embeddings": states[0]})


def build_qwenimage_transformer(out, cases, g):
    """The transformer on a batch of a 4 x 6 patch grid whose second prompt has 4 real tokens of 7
    (the pipeline's padding mask), t = 0.3 and 0.95; cases/qwenimage_transformer.*."""
    from diffusers import QwenImageTransformer2DModel

    model = QwenImageTransformer2DModel(patch_size=2, in_channels=64, out_channels=16,
                                        num_layers=2, attention_head_dim=16,
                                        num_attention_heads=2, joint_attention_dim=32,
                                        axes_dims_rope=(4, 6, 6)).eval()
    perturb_(model, g)
    # An output of about unit size, so that 1e-5 is float32's error on it and not less.
    model.proj_out.weight.mul_(0.1)
    model.proj_out.bias.mul_(0.1)
    model.save_pretrained(os.path.join(out, "qwenimage_transformer"), safe_serialization=True)
    hidden = torch.randn(2, 24, 64, generator=g)
    text = torch.randn(2, 7, 32, generator=g)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 4:] = 0
    timestep = torch.tensor([0.3, 0.95])
    sample = model(hidden_states=hidden, encoder_hidden_states=text,
                   encoder_hidden_states_mask=mask, timestep=timestep,
                   img_shapes=[[(1, 4, 6)], [(1, 4, 6)]], return_dict=False)[0]
    save_case(cases, "qwenimage_transformer",
              {"hidden_states": hidden, "encoder_hidden_states": text,
               "encoder_hidden_states_mask": mask, "timestep": timestep},
              {"sample": sample})


def qwenimage_vae(g):
    """Wan 2.1's layout at a tiny width with Qwen-Image's 16 latent channels."""
    from diffusers import AutoencoderKLQwenImage

    model = AutoencoderKLQwenImage(base_dim=8, z_dim=16, dim_mult=[1, 2, 2, 2], num_res_blocks=1,
                                   temperal_downsample=[False, True, True],
                                   latents_mean=[0.1 * (i % 5) - 0.2 for i in range(16)],
                                   latents_std=[0.6 + 0.1 * (i % 7) for i in range(16)]).eval()
    for p in model.parameters():
        p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return model


def qwenimage_scheduler():
    """Qwen-Image's scheduler_config.json (and ai-toolkit's qwen_image.py scheduler_config)."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler(base_image_seq_len=256, base_shift=0.5,
                                           max_image_seq_len=8192, max_shift=0.9,
                                           num_train_timesteps=1000, shift=1.0,
                                           shift_terminal=0.02, time_shift_type="exponential",
                                           use_dynamic_shifting=True)


def pipeline_text_encoder_config(vocab, vision, **token_ids):
    """The pipelines' tiny Qwen2.5-VL: a 2-layer language model with mrope and a vision tower of
    `vision`'s depth and windows (16 wide, 2 heads, merged to the language model's 32)."""
    from transformers import Qwen2_5_VLConfig

    return Qwen2_5_VLConfig(
        text_config=dict(vocab_size=vocab, hidden_size=32, intermediate_size=56,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         rms_norm_eps=1e-6, max_position_embeddings=1024,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                          "mrope_section": [1, 1, 2]}),
        vision_config=dict(hidden_size=16, intermediate_size=24, num_heads=2, out_hidden_size=32,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2, **vision),
        **token_ids)


QWEN_PROMPTS = ["a photo of a cat", "It's a painting of the mountains at sunset, " * 3, ""]


@torch.no_grad()
def build_pipeline(out, cases):
    """A QwenImagePipeline folder (OUT/qwenimage/) over the tiny transformer and VAE, a tiny
    Qwen2.5-VL whose vocabulary is zimage_reference.py's Qwen2 tokenizer's; and
    cases/qwenimage_prompts.*: QwenImagePipeline.encode_prompt of QWEN_PROMPTS (the template,
    its first 34 tokens dropped, padded to the longest); cases/qwenimage_sigmas.*: the sampler's
    sigmas; cases/qwenimage_pipeline.*: seeded images with a negative prompt."""
    from diffusers import QwenImagePipeline, QwenImageTransformer2DModel
    from transformers import AutoTokenizer, Qwen2_5_VLForConditionalGeneration

    g = torch.Generator().manual_seed(43)
    tokenizer = AutoTokenizer.from_pretrained(os.path.join(out, "qwen2_tokenizer"))
    vocab = len(tokenizer)
    config = pipeline_text_encoder_config(
        vocab, dict(depth=1, fullatt_block_indexes=[0]), image_token_id=vocab - 1,
        video_token_id=vocab - 2, vision_start_token_id=vocab - 3, vision_end_token_id=vocab - 4)
    text_encoder = Qwen2_5_VLForConditionalGeneration(config).eval()
    perturb_(text_encoder, g)
    transformer = QwenImageTransformer2DModel.from_pretrained(
        os.path.join(out, "qwenimage_transformer")).eval()
    pipe = QwenImagePipeline(scheduler=qwenimage_scheduler(), vae=qwenimage_vae(g),
                             text_encoder=text_encoder, tokenizer=tokenizer,
                             transformer=transformer)
    pipe.save_pretrained(os.path.join(out, "qwenimage"), safe_serialization=True)
    # The sampler's sigmas: linspace, the exponential dynamic shift, stretched to 0.02.
    from diffusers.pipelines.qwenimage.pipeline_qwenimage import calculate_shift
    import numpy as np
    sigmas = {}
    for steps, tokens in ((3, 24), (7, 1024)):
        mu = calculate_shift(tokens, 256, 8192, 0.5, 0.9)
        pipe.scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu)
        sigmas[f"sigmas_{steps}_{tokens}"] = pipe.scheduler.sigmas.clone()
    save_case(cases, "qwenimage_sigmas", {}, sigmas)
    embeds, mask = pipe.encode_prompt(prompt=list(QWEN_PROMPTS), device="cpu")
    save_case(cases, "qwenimage_prompts", {}, {"prompt_embeds": embeds, "mask": mask})
    with open(os.path.join(cases, "qwenimage_prompts.json"), "w") as f:
        json.dump({"prompts": QWEN_PROMPTS}, f)
    # The whole pipeline with a negative prompt (true CFG, ai-toolkit's guidance_scale as
    # true_cfg_scale), 32x48 pixels (2x3 packed tokens), 3 steps, decoded to [0, 1].
    seeds = [12, 13]
    negative = "blurry, low quality"
    images = pipe(prompt=QWEN_PROMPTS[:2], negative_prompt=[negative, negative],
                  true_cfg_scale=4.0, height=32, width=48, num_inference_steps=3,
                  output_type="pt",
                  generator=[torch.Generator().manual_seed(s) for s in seeds]).images
    save_case(cases, "qwenimage_pipeline", {}, {"images": images})
    with open(os.path.join(cases, "qwenimage_pipeline.json"), "w") as f:
        json.dump({"prompts": QWEN_PROMPTS[:2], "negative": negative, "seeds": seeds,
                   "height": 32, "width": 48, "steps": 3, "guidance": 4.0}, f)


def build_qwenimage_vae(out, cases, g):

    model = qwenimage_vae(g)
    model.save_pretrained(os.path.join(out, "qwenimage_vae"), safe_serialization=True)
    image = torch.rand(2, 3, 1, 16, 24, generator=g) * 2 - 1
    latents = torch.randn(2, 16, 1, 2, 3, generator=g)
    dist = model.encode(image).latent_dist
    save_case(cases, "qwenimage_vae", {"image": image, "latents": latents},
              {"mean": dist.mean, "logvar": dist.logvar,
               "decoded": model.decode(latents).sample})


@torch.no_grad()
def build(out, cases):
    g = torch.Generator().manual_seed(41)
    build_qwen2_5_vl(out, cases, g)
    build_qwen3(out, cases, g)
    build_qwenimage_transformer(out, cases, g)
    build_qwenimage_vae(out, cases, g)
