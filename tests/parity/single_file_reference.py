"""Tiny Stable Diffusion single-file checkpoints (the original Stability layout: one .safetensors
holding model.diffusion_model.*, first_stage_model.* and the text encoders), for loom's
single-file loader (model/sd/single_file.h).

    build(out, vocab_folder, vocab_size) -> writes OUT/single_file/

For SD 1.x and SDXL: a diffusers folder of a tiny random pipeline laid out as the real one (SD 1.5:
four UNet levels, cross-attention in the first three; SDXL: three levels, none in the first, a
text_time embedding, a CLIP-L and an OpenCLIP encoder), the single file converted from it with the
mapping of diffusers' scripts/convert_diffusers_to_original_{stable_diffusion,sdxl}.py, and a
Hugging Face cache holding the default repo's tokenizer and scheduler (what diffusers'
from_single_file fetches: stable-diffusion-v1-5/stable-diffusion-v1-5 and
stabilityai/stable-diffusion-xl-base-1.0). Each file is checked with diffusers' own loader
(from_single_file, config = the folder): every tensor it converts back equals the folder's, so the
file is what diffusers reads as a real checkpoint. The UNets follow the original configs' head
rule (SD 1.x: 8 heads; SDXL: 64-channel heads), as a loader that infers the config must assume.
"""
import os
import re
import shutil

import torch
from safetensors.torch import save_file

from diffusers import (AutoencoderKL, DDIMScheduler, StableDiffusionPipeline,
                       StableDiffusionXLPipeline, UNet2DConditionModel)
from transformers import (CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection,
                          CLIPTokenizer)


def _tokenizer(vocab_folder, pad_token):
    return CLIPTokenizer(os.path.join(vocab_folder, "vocab.json"),
                         os.path.join(vocab_folder, "merges.txt"), pad_token=pad_token,
                         model_max_length=77)


def _scheduler():
    return DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                         clip_sample=False, set_alpha_to_one=False, steps_offset=1)


def _vae(seed, scaling_factor):
    torch.manual_seed(seed)
    # SD's VAE layout (four levels, two resnets each) at small widths.
    return AutoencoderKL(block_out_channels=[32, 32, 64, 64], in_channels=3, out_channels=3,
                         down_block_types=["DownEncoderBlock2D"] * 4,
                         up_block_types=["UpDecoderBlock2D"] * 4, latent_channels=4,
                         layers_per_block=2, norm_num_groups=32, sample_size=64,
                         scaling_factor=scaling_factor)


def _text_config(vocab_size, hidden, act, projection=None):
    # 64-channel heads, as CLIP-L (768/12) and OpenCLIP bigG (1280/20).
    return CLIPTextConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=37,
                          num_hidden_layers=2, num_attention_heads=hidden // 64,
                          max_position_embeddings=77, hidden_act=act, layer_norm_eps=1e-5,
                          bos_token_id=0, eos_token_id=2, pad_token_id=1,
                          **({"projection_dim": projection} if projection else {}))


def build_sd1_folder(folder, vocab_folder, vocab_size):
    torch.manual_seed(10)
    unet = UNet2DConditionModel(
        block_out_channels=(32, 32, 64, 64), layers_per_block=2, sample_size=8, in_channels=4,
        out_channels=4,
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D",
                          "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D",
                        "CrossAttnUpBlock2D"),
        cross_attention_dim=64, attention_head_dim=8)
    torch.manual_seed(11)
    te = CLIPTextModel(_text_config(vocab_size, 64, "quick_gelu"))
    pipe = StableDiffusionPipeline(unet=unet, vae=_vae(12, 0.18215), text_encoder=te,
                                   tokenizer=_tokenizer(vocab_folder, "<|endoftext|>"),
                                   scheduler=_scheduler(), safety_checker=None,
                                   feature_extractor=None, requires_safety_checker=False)
    pipe.save_pretrained(folder, safe_serialization=True)
    return pipe


def build_sdxl_folder(folder, vocab_folder, vocab_size):
    torch.manual_seed(13)
    unet = UNet2DConditionModel(
        block_out_channels=(64, 64, 128), layers_per_block=2, sample_size=8, in_channels=4,
        out_channels=4, down_block_types=("DownBlock2D", "CrossAttnDownBlock2D",
                                          "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=(1, 1, 2), use_linear_projection=True,
        addition_embed_type="text_time", addition_time_embed_dim=8,
        transformer_layers_per_block=(1, 1, 2), projection_class_embeddings_input_dim=32 + 6 * 8,
        cross_attention_dim=64 + 128)
    torch.manual_seed(14)
    te = CLIPTextModel(_text_config(vocab_size, 64, "quick_gelu"))
    torch.manual_seed(15)
    te2 = CLIPTextModelWithProjection(_text_config(vocab_size, 128, "gelu", projection=32))
    pipe = StableDiffusionXLPipeline(unet=unet, vae=_vae(16, 0.13025), text_encoder=te,
                                     text_encoder_2=te2,
                                     tokenizer=_tokenizer(vocab_folder, "<|endoftext|>"),
                                     tokenizer_2=_tokenizer(vocab_folder, "!"),
                                     scheduler=_scheduler())
    pipe.save_pretrained(folder, safe_serialization=True)
    return pipe


# --- diffusers -> original layout (the mapping of diffusers' convert_diffusers_to_original_*) ---

RESNET_PARTS = [("in_layers.0", "norm1"), ("in_layers.2", "conv1"), ("out_layers.0", "norm2"),
                ("out_layers.3", "conv2"), ("emb_layers.1", "time_emb_proj"),
                ("skip_connection", "conv_shortcut")]
UNET_TOP = {"time_embedding.linear_1": "time_embed.0", "time_embedding.linear_2": "time_embed.2",
            "conv_in": "input_blocks.0.0", "conv_norm_out": "out.0", "conv_out": "out.2",
            "add_embedding.linear_1": "label_emb.0.0", "add_embedding.linear_2": "label_emb.0.2"}


def unet_to_original(state, config):
    per_level = config["layers_per_block"] + 1
    out = {}
    for key, value in state.items():
        name = None
        for hf, sd in UNET_TOP.items():
            if key.startswith(hf + "."):
                name = sd + key[len(hf):]
        m = re.match(r"down_blocks\.(\d+)\.(resnets|attentions)\.(\d+)\.(.*)", key)
        if m:
            block, kind, j, rest = int(m[1]), m[2], int(m[3]), m[4]
            name = f"input_blocks.{per_level * block + j + 1}.{0 if kind == 'resnets' else 1}.{rest}"
        m = re.match(r"down_blocks\.(\d+)\.downsamplers\.0\.conv\.(.*)", key)
        if m:
            name = f"input_blocks.{per_level * (int(m[1]) + 1)}.0.op.{m[2]}"
        m = re.match(r"up_blocks\.(\d+)\.(resnets|attentions)\.(\d+)\.(.*)", key)
        if m:
            block, kind, j, rest = int(m[1]), m[2], int(m[3]), m[4]
            name = f"output_blocks.{per_level * block + j}.{0 if kind == 'resnets' else 1}.{rest}"
        m = re.match(r"up_blocks\.(\d+)\.upsamplers\.0\.(.*)", key)
        if m:
            block = int(m[1])
            has_attention = config["up_block_types"][block].startswith("CrossAttn")
            name = f"output_blocks.{per_level * block + per_level - 1}." \
                   f"{2 if has_attention else 1}.{m[2]}"
        m = re.match(r"mid_block\.resnets\.(\d+)\.(.*)", key)
        if m:
            name = f"middle_block.{2 * int(m[1])}.{m[2]}"
        m = re.match(r"mid_block\.attentions\.0\.(.*)", key)
        if m:
            name = f"middle_block.1.{m[1]}"
        assert name is not None, key
        if ".resnets." in key or key.startswith("mid_block.resnets"):
            for sd, hf in RESNET_PARTS:
                name = name.replace(hf, sd)
        out["model.diffusion_model." + name] = value
    return out


def vae_to_original(state, config):
    levels = len(config["block_out_channels"])
    out = {}
    for key, value in state.items():
        name = key.replace("conv_norm_out", "norm_out")
        name = re.sub(r"encoder\.down_blocks\.(\d+)\.resnets\.", r"encoder.down.\1.block.", name)
        name = re.sub(r"encoder\.down_blocks\.(\d+)\.downsamplers\.0\.",
                      r"encoder.down.\1.downsample.", name)
        # The decoder's levels are numbered from the bottom in the original layout.
        name = re.sub(r"decoder\.up_blocks\.(\d+)\.resnets\.",
                      lambda m: f"decoder.up.{levels - 1 - int(m[1])}.block.", name)
        name = re.sub(r"decoder\.up_blocks\.(\d+)\.upsamplers\.0\.",
                      lambda m: f"decoder.up.{levels - 1 - int(m[1])}.upsample.", name)
        name = re.sub(r"mid_block\.resnets\.(\d+)\.", lambda m: f"mid.block_{int(m[1]) + 1}.", name)
        name = name.replace("conv_shortcut", "nin_shortcut")
        if "mid_block.attentions.0." in name:
            name = name.replace("mid_block.attentions.0.", "mid.attn_1.")
            for hf, sd in [("group_norm.", "norm."), ("to_q.", "q."), ("to_k.", "k."),
                           ("to_v.", "v."), ("to_out.0.", "proj_out.")]:
                name = name.replace(hf, sd)
            if value.dim() == 2:  # the original attention is 1x1 convolutions
                value = value.reshape(*value.shape, 1, 1)
        out["first_stage_model." + name] = value
    return out


def clip_to_original(state, prefix):
    """CLIP-L (transformers' layout inside the original file), with its position ids."""
    out = {prefix + ("" if k.startswith("text_model.") else "text_model.") + k: v
           for k, v in state.items()}
    out[prefix + "text_model.embeddings.position_ids"] = torch.arange(77).unsqueeze(0)
    return out


def open_clip_to_original(state, prefix):
    """transformers' CLIPTextModelWithProjection -> OpenCLIP names, q/k/v fused as in_proj."""
    out, qkv = {}, {}
    parts = [("text_model.encoder.layers.", "transformer.resblocks."), ("layer_norm1", "ln_1"),
             ("layer_norm2", "ln_2"), (".fc1.", ".c_fc."), (".fc2.", ".c_proj."),
             (".self_attn", ".attn"), ("text_model.final_layer_norm.", "ln_final."),
             ("text_model.embeddings.token_embedding.weight", "token_embedding.weight"),
             ("text_model.embeddings.position_embedding.weight", "positional_embedding")]
    for key, value in state.items():
        m = re.match(r"(.*)\.self_attn\.([qkv])_proj\.(weight|bias)$", key)
        if m:
            qkv.setdefault((m[1], m[3]), {})[m[2]] = value
            continue
        if key == "text_projection.weight":
            out[prefix + "text_projection"] = value.T.contiguous()
            continue
        name = key
        for hf, sd in parts:
            name = name.replace(hf, sd)
        out[prefix + name] = value
    for (layer, kind), p in qkv.items():
        name = layer
        for hf, sd in parts:
            name = name.replace(hf, sd)
        out[f"{prefix}{name}.attn.in_proj_{kind}"] = torch.cat([p["q"], p["k"], p["v"]])
    out[prefix + "logit_scale"] = torch.tensor(4.6052)  # OpenCLIP keeps it; loaders drop it
    return out


def write_single_file(pipe, path):
    state = unet_to_original(pipe.unet.state_dict(), pipe.unet.config)
    state.update(vae_to_original(pipe.vae.state_dict(), pipe.vae.config))
    if isinstance(pipe, StableDiffusionXLPipeline):
        state.update(clip_to_original(pipe.text_encoder.state_dict(),
                                      "conditioner.embedders.0.transformer."))
        state.update(open_clip_to_original(pipe.text_encoder_2.state_dict(),
                                           "conditioner.embedders.1.model."))
    else:
        state.update(clip_to_original(pipe.text_encoder.state_dict(),
                                      "cond_stage_model.transformer."))
    # The schedule the original LatentDiffusion registers as buffers (loom reads its config).
    state["alphas_cumprod"] = pipe.scheduler.alphas_cumprod.clone()
    save_file({k: v.contiguous() for k, v in state.items()}, path)


def check_with_diffusers(cls, path, folder, pipe):
    """diffusers' from_single_file must read the file back into the folder's tensors."""
    extra = {"safety_checker": None, "requires_safety_checker": False} \
        if cls is StableDiffusionPipeline else {}
    loaded = cls.from_single_file(path, config=folder, local_files_only=True, **extra)
    components = ["unet", "vae", "text_encoder"] + \
        (["text_encoder_2"] if cls is StableDiffusionXLPipeline else [])
    for name in components:
        want = getattr(pipe, name).state_dict()
        got = getattr(loaded, name).state_dict()
        for key, value in want.items():
            if key.endswith("position_ids"):
                continue
            assert key in got, f"{path}: diffusers did not load {name}.{key}"
            assert torch.equal(got[key].float(), value.float()), \
                f"{path}: diffusers reads {name}.{key} differently"


def fake_hub_cache(cache, repo_id, folder, components):
    """A Hugging Face cache holding `components` of `folder` as repo_id's main revision."""
    repo = os.path.join(cache, "models--" + repo_id.replace("/", "--"))
    revision = "0123456789abcdef0123456789abcdef01234567"
    os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(revision)
    for c in components:
        shutil.copytree(os.path.join(folder, c), os.path.join(repo, "snapshots", revision, c),
                        dirs_exist_ok=True)


@torch.no_grad()
def build(out, vocab_folder, vocab_size):
    root = os.path.join(out, "single_file")
    os.makedirs(root, exist_ok=True)
    cache = os.path.join(root, "hub")
    for arch, builder, cls, repo_id, tokenizers in [
            ("sd1", build_sd1_folder, StableDiffusionPipeline,
             "stable-diffusion-v1-5/stable-diffusion-v1-5", ["tokenizer"]),
            ("sdxl", build_sdxl_folder, StableDiffusionXLPipeline,
             "stabilityai/stable-diffusion-xl-base-1.0", ["tokenizer", "tokenizer_2"])]:
        folder = os.path.join(root, arch + "_folder")
        pipe = builder(folder, vocab_folder, vocab_size)
        path = os.path.join(root, arch + ".safetensors")
        write_single_file(pipe, path)
        check_with_diffusers(cls, path, folder, pipe)
        fake_hub_cache(cache, repo_id, folder, tokenizers + ["scheduler"])
