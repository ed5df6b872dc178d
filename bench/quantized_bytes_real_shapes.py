"""The frozen base's bytes per qtype on real models' shapes (issues 21 and 44), computed, not
measured: the denoisers users train (SD 1.5's and SDXL's UNets, Flux-dev's and Chroma's
transformers, one Wan 2.1 / 2.2 14B expert, Qwen-Image's 20B and Z-Image's 6B transformers) are
built by diffusers with their released configs on the meta device (shapes, no weights), and every
Linear / Conv2d weight is counted as loom's low_vram level 2 holds it
(model/nn/quantized_weight.h; the group rule is quantization_reference.group_size, which
tests/parity checks against optimum-quanto and tests/model against loom's own codes):
  qfloat8 / qint8: 1 byte a weight + a float32 scale a row;
  uint4: half a byte a weight (a row of odd length rounds up) + float16 scale and minimum a group;
every other tensor (biases, norms, embeddings that are not Linear, Wan's Conv3d) in bf16.

Beside them, what an ai-toolkit user gets for the same names (toolkit/util/quantize.py):
  qfloat8: optimum-quanto, 1 byte a weight + a bf16 scale a row (Linear and Conv2d);
  uint4 / uint3: torchao's UIntXWeightOnlyConfig at its defaults (Linear only; groups of 64
  along a row, asymmetric: a bf16 scale and an int32 zero point a group; 4 or 3 bits a weight,
  packed), without an accuracy-recovery adapter (with one, the layers the adapter does not cover
  get uint8).

    .venv/bin/python bench/quantized_bytes_real_shapes.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "parity"))
from quantization_reference import group_size  # noqa: E402


def models():
    from diffusers import (ChromaTransformer2DModel, FluxTransformer2DModel,
                           QwenImageTransformer2DModel, UNet2DConditionModel,
                           WanTransformer3DModel, ZImageTransformer2DModel)
    with torch.device("meta"):
        yield "SD 1.5 UNet", UNet2DConditionModel(cross_attention_dim=768)  # SD 1.x otherwise
        yield "SDXL UNet", UNet2DConditionModel(
            block_out_channels=(320, 640, 1280), layers_per_block=2,
            down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
            transformer_layers_per_block=(1, 2, 10), attention_head_dim=(5, 10, 20),
            cross_attention_dim=2048, use_linear_projection=True,
            addition_embed_type="text_time", addition_time_embed_dim=256,
            projection_class_embeddings_input_dim=2816)
        yield "Flux-dev transformer", FluxTransformer2DModel(guidance_embeds=True)
        yield "Chroma transformer", ChromaTransformer2DModel()
        # Wan-AI/Wan2.1-T2V-14B-Diffusers; Wan 2.2 A14B holds two of these experts.
        yield "Wan 14B expert", WanTransformer3DModel()
        yield "Qwen-Image transformer", QwenImageTransformer2DModel()  # Qwen/Qwen-Image
        yield "Z-Image transformer", ZImageTransformer2DModel()  # Tongyi-MAI/Z-Image-Turbo


def quantized_bytes(weight, qtype):
    """loom's level 2."""
    out = weight.shape[0]
    rest = weight.numel() // out
    if qtype == "uint4":
        return out * ((rest + 1) // 2) + out * (rest // group_size(rest)) * 4
    return weight.numel() + out * 4


def ai_toolkit_bytes(weight, qtype, linear):
    """ai-toolkit's: quanto's qfloat8 on Linear and Conv2d, torchao's UIntX on Linear only."""
    out = weight.shape[0]
    rest = weight.numel() // out
    if qtype == "qfloat8":
        return weight.numel() + out * 2
    if not linear:
        return 2 * weight.numel()
    bits = {"uint4": 4, "uint3": 3}[qtype]
    groups = -(-rest // 64)
    return -(-weight.numel() * bits // 8) + out * groups * (2 + 4)


def main():
    print("| model | parameters | bf16 | loom qfloat8 / qint8 | loom uint4 | ai-toolkit qfloat8 "
          "| ai-toolkit uint4 | ai-toolkit uint3 |")
    print("|---|---|---|---|---|---|---|---|")
    for name, model in models():
        linears = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Linear)}
        weights = linears | {id(m.weight) for m in model.modules()
                             if isinstance(m, torch.nn.Conv2d)}
        bf16, count = 0, 0
        sums = {k: 0 for k in ("q8", "q4", "aq8", "aq4", "aq3")}
        for p in model.parameters():
            count += p.numel()
            bf16 += 2 * p.numel()
            if id(p) in weights:
                linear = id(p) in linears
                sums["q8"] += quantized_bytes(p, "qint8")
                sums["q4"] += quantized_bytes(p, "uint4")
                sums["aq8"] += ai_toolkit_bytes(p, "qfloat8", linear)
                sums["aq4"] += ai_toolkit_bytes(p, "uint4", linear)
                sums["aq3"] += ai_toolkit_bytes(p, "uint3", linear)
            else:
                for k in sums:
                    sums[k] += 2 * p.numel()
        cells = " | ".join(f"{sums[k] / 2**30:.2f} GiB ({sums[k] / bf16:.3f})" for k in sums)
        print(f"| {name} | {count / 1e9:.3f} B | {bf16 / 2**30:.2f} GiB | {cells} |")


if __name__ == "__main__":
    main()
