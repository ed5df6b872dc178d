"""The frozen base's bytes per qtype on real models' shapes (issue 21), computed, not measured:
SD 1.5's and SDXL's UNets and Flux-dev's transformer are built by diffusers on the meta device
(shapes, no weights) and every Linear / Conv2d weight is counted as loom's low_vram level 2
holds it (model/nn/quantized_weight.h; the group rule is quantization_reference.group_size, which
tests/parity checks against optimum-quanto and tests/model against loom's own codes):
  qfloat8 / qint8: 1 byte a weight + a float32 scale a row;
  uint4: half a byte a weight (a row of odd length rounds up) + float16 scale and minimum a group;
every other tensor (biases, norms, embeddings that are not Linear) in bf16.

    .venv/bin/python bench/quantized_bytes_real_shapes.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "parity"))
from quantization_reference import group_size  # noqa: E402


def models():
    from diffusers import FluxTransformer2DModel, UNet2DConditionModel
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


def quantized_bytes(weight, qtype):
    out = weight.shape[0]
    rest = weight.numel() // out
    if qtype == "uint4":
        return out * ((rest + 1) // 2) + out * (rest // group_size(rest)) * 4
    return weight.numel() + out * 4


def main():
    print(f"{'model':22} {'parameters':>11} {'bf16':>10} {'qfloat8/qint8':>15} {'uint4':>15}")
    for name, model in models():
        weights = {id(m.weight) for m in model.modules()
                   if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))}
        bf16 = q8 = q4 = 0
        count = 0
        for p in model.parameters():
            count += p.numel()
            bf16 += 2 * p.numel()
            if id(p) in weights:
                q8 += quantized_bytes(p, "qint8")
                q4 += quantized_bytes(p, "uint4")
            else:
                q8 += 2 * p.numel()
                q4 += 2 * p.numel()
        print(f"{name:22} {count / 1e9:10.3f}B {bf16 / 2**30:6.2f} GiB "
              f"{q8 / 2**30:6.2f} GiB {q8 / bf16:5.3f} {q4 / 2**30:6.2f} GiB {q4 / bf16:5.3f}")


if __name__ == "__main__":
    main()
