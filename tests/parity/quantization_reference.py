"""Reference weight quantization for loom's model/nn/quantized_weight.h (issue 21).

    build(out) -> writes OUT/quantization/cases.safetensors

For each test weight: a reference quantizer written here (qfloat8 and qint8 per output channel,
uint4 affine in groups chosen by quanto's rule (group_size below) with float16 scale and
minimum, two codes per byte, a zero nibble ending a row of odd length), checked
against optimum-quanto's own qfloat8 / qint8 weight quantization where quanto runs on the CPU
(the codes and scales must be equal), and the dequantized weights. float8 codes are stored as
their bytes (uint8). A zero row and a constant group exercise the zero-scale rule.
"""
import os

import torch
from safetensors.torch import save_file


def group_size(row):
    """optimum-quanto's QModuleMixin: 128, 96, 64 or 32 when one divides a row longer than 128,
    else the whole row (checked against quanto itself in check_group_rule)."""
    if row > 128:
        for g in (128, 96, 64, 32):
            if row % g == 0:
                return g
    return row


def rows(w):
    return w.float().reshape(w.shape[0], -1)


def nonzero(scale):
    return torch.where(scale == 0, torch.ones_like(scale), scale)


def quantize_8bit(w, floating):
    r = rows(w)
    qmax = 448.0 if floating else 127.0
    scale = nonzero(r.abs().amax(1, keepdim=True) / qmax)
    scaled = r / scale
    if floating:
        data = scaled.clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    else:
        data = torch.round(scaled).clamp(-128, 127).to(torch.int8)
    return data, scale


def quantize_uint4(w):
    r = rows(w)
    out, rest = r.shape
    group = group_size(rest)
    g = r.reshape(out, rest // group, group)
    mn, mx = g.amin(2, keepdim=True), g.amax(2, keepdim=True)
    scale = nonzero((mx - mn) / 15.0).half()
    mn = mn.half()
    codes = torch.round((g - mn.float()) / scale.float()).clamp(0, 15).to(torch.uint8)
    codes = codes.reshape(out, rest)
    if rest % 2:
        codes = torch.cat([codes, torch.zeros(out, 1, dtype=torch.uint8)], 1)
    codes = codes.reshape(out, -1, 2)
    data = codes[..., 0] | (codes[..., 1] << 4)
    return data.contiguous(), scale, mn


def dequantize_uint4(data, scale, mn, shape):
    out = data.shape[0]
    rest = 1
    for s in shape[1:]:
        rest *= s
    codes = torch.stack([data & 15, data >> 4], 2).reshape(out, -1)[:, :rest]
    codes = codes.reshape(out, scale.shape[1], -1)
    return (mn.float() + codes.float() * scale.float()).reshape(shape)


def check_group_rule():
    """quanto's own QLinear picks the same uint4 group as group_size."""
    from optimum.quanto import qint4
    from optimum.quanto.nn import QLinear
    for row in (32, 72, 128, 300, 320, 384, 576, 3072):
        layer = QLinear(row, 8, bias=False, weights=qint4)
        assert (layer.weight_group_size or row) == group_size(row), \
            f"quanto groups a row of {row} by {layer.weight_group_size}, the reference by {group_size(row)}"


def check_with_quanto(name, w, fp8, fp8_scale, i8, i8_scale):
    """optimum-quanto's weight quantizers (AbsmaxOptimizer, axis 0) give the same codes."""
    from optimum.quanto import qfloat8, qint8
    from optimum.quanto.tensor.optimizers import AbsmaxOptimizer
    from optimum.quanto.tensor.weights import quantize_weight
    r = rows(w)
    for qtype, data, scale in [(qfloat8, fp8, fp8_scale), (qint8, i8, i8_scale)]:
        q = quantize_weight(r, qtype, axis=0, scale=AbsmaxOptimizer()(r, qtype, axis=0),
                            optimized=False)
        assert torch.equal(q._scale.float(), scale), f"{name}: {qtype} scale differs from quanto"
        assert torch.equal(q._data.view(torch.uint8), data.view(torch.uint8)), \
            f"{name}: {qtype} codes differ from quanto"


def build(out):
    folder = os.path.join(out, "quantization")
    os.makedirs(folder, exist_ok=True)
    g = torch.Generator().manual_seed(21)
    weights = {
        "linear": torch.randn(64, 256, generator=g) * 0.05,
        "row300": torch.randn(24, 300, generator=g),              # no group divides 300: one a row
        "row288": torch.randn(12, 288, generator=g),              # 288 = 3 groups of 96
        "row320": torch.randn(6, 320, generator=g),               # 320 = 5 groups of 64
        "odd": torch.randn(5, 3, 3, 3, generator=g),              # a 27-wide row: odd, one group
        "conv": torch.randn(16, 8, 3, 3, generator=g) * 0.2,      # read as [16, 72]
        "wide_range": torch.randn(8, 512, generator=g) * torch.logspace(-3, 1, 8).unsqueeze(1),
    }
    special = torch.randn(4, 256, generator=g)
    special[1] = 0.0             # a zero row: scale 1, codes 0
    special[2, :128] = 0.25      # a constant group
    weights["special"] = special
    check_group_rule()
    tensors = {}
    for name, w in weights.items():
        fp8, fp8_scale = quantize_8bit(w, True)
        i8, i8_scale = quantize_8bit(w, False)
        u4, u4_scale, u4_min = quantize_uint4(w)
        if name != "special":  # quanto divides a zero row by a zero scale
            check_with_quanto(name, w, fp8, fp8_scale, i8, i8_scale)
        tensors.update({
            f"{name}.weight": w,
            f"{name}.qfloat8.data": fp8.view(torch.uint8),
            f"{name}.qfloat8.scale": fp8_scale,
            f"{name}.qfloat8.dequantized": (fp8.float() * fp8_scale).reshape(w.shape),
            f"{name}.qint8.data": i8,
            f"{name}.qint8.scale": i8_scale,
            f"{name}.qint8.dequantized": (i8.float() * i8_scale).reshape(w.shape),
            f"{name}.uint4.data": u4,
            f"{name}.uint4.scale": u4_scale,
            f"{name}.uint4.minimum": u4_min,
            f"{name}.uint4.dequantized": dequantize_uint4(u4, u4_scale, u4_min, w.shape),
        })
    save_file({k: v.contiguous() for k, v in tensors.items()},
              os.path.join(folder, "cases.safetensors"))
