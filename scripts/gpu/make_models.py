#!/usr/bin/env python3
"""The base models of scripts/gpu_check.sh, made where they are used (no weights travel): a
diffusers folder with a UNet of the real SD 1.5 configuration and random weights (860M
parameters), the bundled base model's tokenizer and VAE (datasets/loom-tiny-sd), and a small CLIP
text encoder whose width matches the UNet's cross-attention (768), all saved in `--dtype`.

`--unet toy` writes the bundled model's own small UNet shape instead (the dry run of the check:
the same steps at toy sizes).

    make_models.py OUT_DIR [--unet sd15|toy] [--dtype bf16|fp32]
"""

import argparse
import json
import os
import shutil
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "datasets", "loom-tiny-sd")

# runwayml/stable-diffusion-v1-5's unet/config.json, the keys that differ from diffusers'
# defaults or that define the shape.
SD15_UNET = dict(
    sample_size=64, in_channels=4, out_channels=4, layers_per_block=2,
    block_out_channels=(320, 640, 1280, 1280),
    down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D",
                      "DownBlock2D"),
    up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D",
                    "CrossAttnUpBlock2D"),
    cross_attention_dim=768, attention_head_dim=8, norm_num_groups=32, act_fn="silu",
    flip_sin_to_cos=True, freq_shift=0, downsample_padding=1, mid_block_scale_factor=1,
    center_input_sample=False, norm_eps=1e-5)


def text_encoder(width, dtype, out):
    """A 2-layer CLIP text model of hidden size `width` on the bundled tokenizer's vocabulary."""
    from transformers import CLIPTextConfig, CLIPTextModel

    with open(os.path.join(TINY, "text_encoder", "config.json")) as f:
        tiny = json.load(f)
    config = CLIPTextConfig(
        vocab_size=tiny["vocab_size"], hidden_size=width, intermediate_size=4 * width,
        num_hidden_layers=2, num_attention_heads=max(1, width // 64),
        max_position_embeddings=tiny["max_position_embeddings"], hidden_act="quick_gelu",
        bos_token_id=tiny["bos_token_id"], eos_token_id=tiny["eos_token_id"],
        pad_token_id=tiny["pad_token_id"])
    torch.manual_seed(1)
    model = CLIPTextModel(config).to(dtype)
    model.save_pretrained(os.path.join(out, "text_encoder"), safe_serialization=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--unet", choices=("sd15", "toy"), default="sd15")
    p.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    a = p.parse_args()
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32

    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out)
    for part in ("tokenizer", "vae", "scheduler"):
        shutil.copytree(os.path.join(TINY, part), os.path.join(a.out, part))
    shutil.copy(os.path.join(TINY, "model_index.json"), a.out)

    if a.unet == "sd15":
        from diffusers import UNet2DConditionModel

        torch.manual_seed(0)
        unet = UNet2DConditionModel(**SD15_UNET).to(dtype)
        unet.save_pretrained(os.path.join(a.out, "unet"), safe_serialization=True)
        text_encoder(SD15_UNET["cross_attention_dim"], dtype, a.out)
        params = sum(t.numel() for t in unet.parameters())
    else:
        shutil.copytree(os.path.join(TINY, "unet"), os.path.join(a.out, "unet"))
        shutil.copytree(os.path.join(TINY, "text_encoder"), os.path.join(a.out, "text_encoder"))
        params = None  # the bundled model's, as shipped
    print(json.dumps({"model": a.out, "unet": a.unet, "dtype": a.dtype,
                      "unet_parameters": params}))


if __name__ == "__main__":
    sys.exit(main())
