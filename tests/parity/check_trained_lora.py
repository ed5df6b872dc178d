#!/usr/bin/env python3
"""A LoRA file loom trained loads into the diffusers pipeline of its base model with every key
used: `load_lora_weights` without warnings, one adapter on the denoiser covering exactly the
file's modules, and each module's weight change B @ A equal to the file's.

A Chroma LoRA is in the layout ai-toolkit writes for Chroma: Black Forest Labs' module names under
"diffusion_model." (double_blocks.N.img_attn.qkv: q, k and v fused), the layout ComfyUI reads.
diffusers 0.42.1's FluxLoraLoaderMixin, which ChromaPipeline uses, reads BFL names only from kohya
files (lora_unet_...) and then only at Flux.1's own shapes (its single-block split is hard-coded
to [3072, 3072, 3072, 12288], loaders/lora_conversion_utils.py), so such a file is first
converted here to diffusers' names — each fused key's rows split among its parts, by the rules
below written from BFL's checkpoint layout, not from loom's code — and the expected change of
each diffusers module is its rows of the fused key's B @ A.

A Wan LoRA is in the original Wan names under "diffusion_model." (ai-toolkit's layout, which
ComfyUI reads); its expected changes are those of diffusers' own converter
(_convert_non_diffusers_wan_lora_to_diffusers). For Flux, Kontext and Wan every key of the file
must also be one ComfyUI's LoraLoaderModelOnly applies (comfy_key_map.py, comfy/lora.py's key map).

Usage: check_trained_lora.py MODEL_DIR LORA_FILE   (exit 0 when every check passes)
"""

import json
import logging
import os
import sys
import warnings

from diffusers import DiffusionPipeline

import comfy_key_map
from check_lora_interop import (BENIGN, DELTA_TOLERANCE, Checks, WarningCapture, denoiser,
                                diffusers_deltas, file_deltas, first, wan_original_file_deltas)


# BFL's fused Linears and the diffusers modules of their output rows, in order (after
# "double_blocks.N." -> "transformer_blocks.N.", "single_blocks.N." ->
# "single_transformer_blocks.N."), as diffusers' own Flux conversion splits them
# (_convert_sd_scripts_to_ai_toolkit).
BFL_DOUBLE = {"img_attn.qkv": ["attn.to_q", "attn.to_k", "attn.to_v"],
              "txt_attn.qkv": ["attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"],
              "img_attn.proj": ["attn.to_out.0"], "txt_attn.proj": ["attn.to_add_out"],
              "img_mlp.0": ["ff.net.0.proj"], "img_mlp.2": ["ff.net.2"],
              "txt_mlp.0": ["ff_context.net.0.proj"], "txt_mlp.2": ["ff_context.net.2"],
              "img_mod.lin": ["norm1.linear"], "txt_mod.lin": ["norm1_context.linear"]}
BFL_SINGLE = {"linear1": ["attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp"],
              "linear2": ["proj_out"], "modulation.lin": ["norm.linear"]}


def bfl_to_diffusers(tensors, transformer):
    """A BFL-named PEFT LoRA (diffusion_model.<name>.lora_A/B) in diffusers' names
    (transformer.<path>.lora_A/B) and {path: expected weight change}. A fused key whose lora_B is
    block-diagonal over its parts splits into each part's down and up; otherwise (a LoRA trained
    on the fused Linear) every part gets lora_A and its rows of lora_B."""
    import torch
    modules = dict(transformer.named_modules())
    out, want, stray = {}, {}, []
    stems = {k[: k.rindex(".lora_")] for k in tensors if ".lora_" in k}
    stray += [k for k in tensors if ".lora_" not in k]
    for stem in sorted(stems):
        a, b = tensors.get(stem + ".lora_A.weight"), tensors.get(stem + ".lora_B.weight")
        name = stem.removeprefix("diffusion_model.")
        kind, index, rest = (name.split(".", 2) + ["", ""])[:3]
        table, block = {"double_blocks": (BFL_DOUBLE, "transformer_blocks"),
                        "single_blocks": (BFL_SINGLE, "single_transformer_blocks")}.get(
                            kind, ({}, ""))
        parts = [f"{block}.{index}.{p}" for p in table.get(rest, [])]
        if a is None or b is None or not parts or not all(p in modules for p in parts):
            stray.append(stem)
            continue
        outs = [modules[p].weight.shape[0] for p in parts]
        rank = a.shape[0] // len(parts)
        diagonal = a.shape[0] % len(parts) == 0 and len(parts) > 1
        row = 0
        for i, size in enumerate(outs):
            rows = b[row:row + size]
            off = torch.cat([rows[:, :i * rank], rows[:, (i + 1) * rank:]], dim=1)
            diagonal = diagonal and bool((off == 0).all())
            row += size
        row = 0
        for i, (path, size) in enumerate(zip(parts, outs)):
            rows = b[row:row + size]
            want[path] = rows.double() @ a.double()
            down, up = (a[i * rank:(i + 1) * rank], rows[:, i * rank:(i + 1) * rank]) \
                if diagonal else (a, rows)
            out[f"transformer.{path}.lora_A.weight"] = down.contiguous()
            out[f"transformer.{path}.lora_B.weight"] = up.contiguous()
            row += size
    return out, want, stray


def main(model_dir, lora_file):
    checks = Checks()
    capture = WarningCapture()
    logging.getLogger("diffusers").addHandler(capture)
    logging.getLogger("peft").addHandler(capture)
    # The Edit pipelines' processor needs a video processor, which transformers 5 builds with
    # torchvision; loading a LoRA needs neither, so it is left out.
    with open(os.path.join(model_dir, "model_index.json")) as f:
        extra = {"processor": None} if "processor" in json.load(f) else {}
    pipe = DiffusionPipeline.from_pretrained(model_dir, **extra)
    what = f"{type(pipe).__name__} {os.path.basename(lora_file)}"
    comfy_stems = (comfy_key_map.stems_for(pipe) if type(pipe).__name__ in
                   ("FluxPipeline", "FluxKontextPipeline", "WanPipeline") else None)
    from safetensors.torch import load_file
    bfl = type(pipe).__name__ == "ChromaPipeline" and all(
        k.startswith("diffusion_model.") for k in load_file(lora_file))
    if bfl:
        converted, want, stray = bfl_to_diffusers(load_file(lora_file), denoiser(pipe))
        num_keys = len(load_file(lora_file))
        what += " (BFL names, converted)"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if bfl:
                pipe.load_lora_weights(converted)
            else:
                pipe.load_lora_weights(os.path.dirname(lora_file),
                                       weight_name=os.path.basename(lora_file))
        except Exception as e:  # noqa: BLE001 - reported as the check's failure
            checks.report(False, f"{what} load_lora_weights", f"{type(e).__name__}: {e}"[:400])
            return 1
    noise = [m for m in capture.messages if not BENIGN.search(m)] + [
        f"{w.category.__name__}: {w.message}" for w in caught
        if "/diffusers/" in w.filename or "/peft/" in w.filename]
    checks.report(not noise, f"{what} load_lora_weights without warnings",
                  "; ".join(m[:300] for m in noise))
    kohya = lora_file.endswith(".kohya.safetensors")
    wan_original = type(pipe).__name__ == "WanPipeline" and all(
        k.startswith("diffusion_model.") for k in load_file(lora_file))
    if wan_original:
        want, num_keys, stray = wan_original_file_deltas(lora_file)
        stray = ["(keys the converter left)"] if stray else []
    elif not bfl:
        want, num_keys, stray = file_deltas(lora_file)
    adapters = list(getattr(denoiser(pipe), "peft_config", {}))
    if not checks.report(len(adapters) == 1, f"{what} one adapter", f"adapters {adapters}"):
        return 1
    got = diffusers_deltas(denoiser(pipe), adapters[0], kohya)
    missing, extra = set(want) - set(got), set(got) - set(want)
    checks.report(not missing and not extra and not stray and want,
                  f"{what} every key used",
                  f"{len(got)} modules loaded, {len(want)} in the file ({num_keys} keys)"
                  + (f"; not loaded: {first(missing)}" if missing else "")
                  + (f"; not in the file: {first(extra)}" if extra else "")
                  + (f"; stray keys: {first(stray)}" if stray else ""))
    if comfy_stems is not None:
        _, missed = comfy_key_map.loaded_keys(load_file(lora_file), comfy_stems)
        checks.report(not missed, f"{what} every key in ComfyUI's key map",
                      f"not loaded: {first(missed)}" if missed else f"{num_keys} keys")
    worst = max((((got[n] - want[n]).abs().max() / want[n].abs().max().clamp_min(1e-30)).item()
                 for n in set(want) & set(got)), default=0.0)
    checks.report(worst <= DELTA_TOLERANCE, f"{what} per-module weight change",
                  f"max relative error {worst:.3g}")
    print(f"{checks.passed} passed, {checks.failed} failed")
    return 0 if checks.failed == 0 else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
