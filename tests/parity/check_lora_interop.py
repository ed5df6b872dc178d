#!/usr/bin/env python3
"""Loads loom's LoRA files into diffusers the way users do and compares the numbers.

    check_lora_interop.py LORA_INTEROP_EXPORT REF_DIR [LOOM]

For sd1 and sdxl, runs lora_interop_export (seeded random LoRAs with alpha != rank, with and
without 3x3 convs, saved in the kohya and peft layouts, plus loom's UNet output with them
applied), and for flux (the transformer blocks' Linear layers, peft layout, as ai-toolkit saves
Flux LoRAs), then for every file:
  - builds the pipeline with from_pretrained(REF_DIR/<model>) and calls
    pipe.load_lora_weights(folder, weight_name=file), failing on any diffusers/peft warning;
  - checks the modules diffusers gave a LoRA are exactly the file's modules, and that each one's
    change scaling * B @ A equals the file's (alpha / rank) * up @ down (every key consumed, with
    the right scale);
  - checks every key of the file is one ComfyUI's LoraLoaderModelOnly applies (comfy_key_map.py:
    comfy/lora.py's key map; a UNet's "peft" file is in diffusers' attention-processor names for
    that);
  - runs pipe.unet (pipe.transformer) on the case inputs and compares with loom's output (max abs error <= 1e-4),
    after checking the LoRA moves the output well beyond that tolerance.
With LOOM, also `loom sample` with the Flux LoRA: its PNG equals FluxPipeline's image for the
same seed with the file loaded by load_lora_weights (within one level of 255).
Prints one line per check and a final 'N passed, N failed' line; exits 1 on any failure.
"""
import logging
import os
import re
import subprocess
import sys
import tempfile
import warnings

import torch
from safetensors import safe_open
from safetensors.torch import load_file

import comfy_key_map
import diffusers
import transformers
from diffusers import FluxPipeline, StableDiffusionPipeline, StableDiffusionXLPipeline

TOLERANCE = 1e-4         # UNet output, loom vs diffusers (float32 on the CPU)
DELTA_TOLERANCE = 1e-6   # per-module weight change, relative to its largest entry
MIN_EFFECT = 1e-2        # the LoRA must move the output by at least this much

# The one warning a denoiser-only LoRA rightly gets: the pipeline also offers it to the text
# encoders (CLIP for SD and Flux, T5 for Chroma).
BENIGN = re.compile(r"No LoRA keys associated to (CLIPTextModel(WithProjection)?|T5EncoderModel) "
                    r"found with the prefix='text_encoder(_2)?'")

# (model folder, pipeline class, case inputs, variants, layouts)
MODELS = [
    ("sd1", StableDiffusionPipeline, "sd1_unet", ["linear", "conv", "kohya_conv"],
     ["kohya", "peft"]),
    ("sdxl", StableDiffusionXLPipeline, "sdxl_unet", ["linear", "conv", "kohya_conv"],
     ["kohya", "peft"]),
    ("flux", FluxPipeline, "flux_transformer", ["linear"], ["peft"]),
]


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def report(self, ok, what, detail=""):
        print(f"{'ok  ' if ok else 'FAIL'} {what}{': ' + detail if detail else ''}", flush=True)
        self.passed += bool(ok)
        self.failed += not ok
        return ok


class WarningCapture(logging.Handler):
    """Collects the records diffusers logs at WARNING and above."""

    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(f"{record.name}: {record.getMessage()}")


def file_deltas(path):
    """({module: expected weight change}, number of keys, [keys no module accounts for]) of a loom
    LoRA file in either layout. Module names are kohya names or module paths, as in the file."""
    tensors = load_file(path)
    kohya = any(k.startswith("lora_unet_") for k in tensors)
    if not kohya and not any(".lora_A." in k for k in tensors):
        # A UNet's file in diffusers' attention-processor names (attn1.processor.to_q_lora.down):
        # read as diffusers' loader reads it.
        from diffusers.utils.state_dict_utils import convert_unet_state_dict_to_peft
        tensors = convert_unet_state_dict_to_peft(tensors)
    parts = (".lora_down.weight", ".lora_up.weight", ".alpha") if kohya else \
        (".lora_A.weight", ".lora_B.weight")
    modules = {}
    stray = []
    for key in tensors:
        part = next((p for p in parts if key.endswith(p)), None)
        if part is None:
            stray.append(key)
            continue
        modules.setdefault(key[: -len(part)], {})[part] = tensors[key].double()
    deltas = {}
    for stem, found in modules.items():
        if len(found) != len(parts):
            stray += [stem + p for p in found]  # an incomplete module loads nowhere sensibly
            continue
        down, up = found[parts[0]], found[parts[1]]
        scale = found[".alpha"].item() / down.shape[0] if kohya else 1.0
        deltas[stem if kohya else stem.removeprefix("unet.").removeprefix("transformer.")
                .removeprefix("diffusion_model.")] = \
            (up.flatten(1) @ down.flatten(1)) * scale
    return deltas, len(tensors), stray


def wan_original_file_deltas(path):
    """{diffusers module path: B @ A} of a Wan LoRA file in the original names under
    "diffusion_model." (ai-toolkit's and ComfyUI's layout), converted by diffusers' own converter,
    the number of keys, and whether the converter left keys over."""
    from diffusers.loaders.lora_conversion_utils import (
        _convert_non_diffusers_wan_lora_to_diffusers)

    tensors = load_file(path)
    assert all(k.startswith("diffusion_model.") for k in tensors), "keys without diffusion_model."
    converted = _convert_non_diffusers_wan_lora_to_diffusers(dict(tensors))
    deltas = {}
    for key, a in converted.items():
        if not key.endswith(".lora_A.weight"):
            continue
        stem = key[: -len(".lora_A.weight")].removeprefix("transformer.")
        b = converted[key.replace(".lora_A.", ".lora_B.")]
        deltas[stem] = b.double() @ a.double()
    return deltas, len(tensors), 2 * len(deltas) != len(tensors)


# SDXL's added-condition embedding is written by its sgm name (lora/target_rules.h kohya_name).
SGM_NAMES = {"add_embedding.linear_1": "label_emb.0.0", "add_embedding.linear_2": "label_emb.0.2"}


def kohya_name(module_path):
    return "lora_unet_" + SGM_NAMES.get(module_path, module_path).replace(".", "_")


def diffusers_deltas(unet, adapter, kohya):
    """{module path (kohya name for kohya files): scaling * B @ A} of the LoRAs diffusers made."""
    from peft.tuners.lora import LoraLayer

    deltas = {}
    for name, module in unet.named_modules():
        if not isinstance(module, LoraLayer) or adapter not in module.lora_A:
            continue
        a = module.lora_A[adapter].weight.detach().double()
        b = module.lora_B[adapter].weight.detach().double()
        delta = (b.flatten(1) @ a.flatten(1)) * module.scaling[adapter]
        deltas[kohya_name(name) if kohya else name] = delta
    return deltas


def first(items, n=3):
    items = sorted(items)
    return ", ".join(items[:n]) + (", ..." if len(items) > n else "")


def denoiser(pipe):
    return pipe.transformer if hasattr(pipe, "transformer") else pipe.unet


def run_unet(pipe, inputs):
    if hasattr(pipe, "transformer"):
        with torch.no_grad():
            return pipe.transformer(**inputs).sample
    kwargs = {}
    if "text_embeds" in inputs:
        kwargs["added_cond_kwargs"] = {"text_embeds": inputs["text_embeds"],
                                       "time_ids": inputs["time_ids"]}
    with torch.no_grad():
        return pipe.unet(inputs["sample"], inputs["timestep"], inputs["encoder_hidden_states"],
                         **kwargs).sample


def check_file(checks, pipeline_class, model_dir, folder, weight_name, inputs, loom_out, capture):
    what = f"{os.path.basename(model_dir)} {weight_name}"
    pipe = pipeline_class.from_pretrained(model_dir)  # float32, as make_reference.py saved it
    base = run_unet(pipe, inputs)
    comfy_stems = comfy_key_map.stems_for(pipe)  # of the model as ComfyUI has it, before the LoRA

    with safe_open(os.path.join(folder, weight_name), "pt") as f:
        metadata = f.metadata() or {}
    checks.report(metadata.get("format") == "pt", f"{what} metadata format=pt",
                  f"format {metadata.get('format')!r}")

    capture.messages.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            # Exactly what users do with a downloaded LoRA file.
            pipe.load_lora_weights(folder, weight_name=weight_name)
        except Exception as e:  # noqa: BLE001 - report it as this file's failure
            checks.report(False, f"{what} load_lora_weights",
                          f"{type(e).__name__}: {str(e)[:400]}")
            return
    noise = [m for m in capture.messages if not BENIGN.search(m)] + [
        f"{w.category.__name__}: {w.message}" for w in caught
        if "/diffusers/" in w.filename or "/peft/" in w.filename]
    checks.report(not noise, f"{what} load_lora_weights without warnings",
                  "; ".join(m[:300] for m in noise))

    kohya = weight_name.endswith(".kohya.safetensors")
    want, num_keys, stray = file_deltas(os.path.join(folder, weight_name))
    adapters = list(getattr(denoiser(pipe), "peft_config", {}))
    if not checks.report(len(adapters) == 1, f"{what} one adapter on the denoiser",
                         f"adapters {adapters}"):
        return
    got = diffusers_deltas(denoiser(pipe), adapters[0], kohya)
    missing = set(want) - set(got)
    extra = set(got) - set(want)
    detail = f"{len(got)} diffusers LoRA modules, {len(want)} in the file ({num_keys} keys)"
    if missing:
        detail += f"; not loaded: {first(missing)}"
    if extra:
        detail += f"; not in the file: {first(extra)}"
    if stray:
        detail += f"; keys of no complete module: {first(stray)}"
    checks.report(not missing and not extra and not stray, f"{what} every module loaded", detail)
    _, missed = comfy_key_map.loaded_keys(load_file(os.path.join(folder, weight_name)),
                                          comfy_stems)
    checks.report(not missed, f"{what} every key in ComfyUI's key map",
                  f"not loaded: {len(missed)} of {num_keys} keys, {first(missed)}" if missed
                  else f"{num_keys} keys")

    worst, worst_name = 0.0, ""
    for name in set(want) & set(got):
        w, g = want[name], got[name]
        if w.shape != g.shape:
            worst, worst_name = float("inf"), f"{name} shape {tuple(g.shape)} != {tuple(w.shape)}"
            break
        err = ((g - w).abs().max() / w.abs().max().clamp_min(1e-30)).item()
        if err > worst:
            worst, worst_name = err, name
    checks.report(worst <= DELTA_TOLERANCE, f"{what} per-module weight change",
                  f"max relative error {worst:.3g} (tolerance {DELTA_TOLERANCE:g})" +
                  (f" at {worst_name}" if worst_name else ""))

    out = run_unet(pipe, inputs)
    effect = (out.double() - base.double()).abs().max().item()
    checks.report(effect >= MIN_EFFECT, f"{what} LoRA changes the output",
                  f"max abs change {effect:.3g} (at least {MIN_EFFECT:g})")
    if tuple(out.shape) != tuple(loom_out.shape):
        checks.report(False, f"{what} output", f"shape {tuple(out.shape)} != loom's "
                      f"{tuple(loom_out.shape)}")
        return
    err = (out.double() - loom_out.double()).abs().max().item()
    checks.report(err <= TOLERANCE, f"{what} output vs loom",
                  f"max abs error {err:.3g} (tolerance {TOLERANCE:g})")


def check_flux_sample(checks, loom, model_dir, folder, weight_name, tmp):
    """`loom sample` with a Flux LoRA against FluxPipeline with the same file and seed."""
    import numpy as np
    from PIL import Image

    out = os.path.join(tmp, "flux_samples")
    settings = {"prompt": "a photo of a cat", "seed": 3, "steps": 2, "width": 24, "height": 16,
                "guidance": 3.5, "tokens": 32}
    run = subprocess.run([loom, "sample", "--model", model_dir, "--lora",
                          os.path.join(folder, weight_name), "--prompt", settings["prompt"],
                          "--seed", str(settings["seed"]), "--steps", str(settings["steps"]),
                          "--width", str(settings["width"]), "--height", str(settings["height"]),
                          "--guidance", str(settings["guidance"]), "--max-sequence-length",
                          str(settings["tokens"]), "--out", out], capture_output=True, text=True)
    if not checks.report(run.returncode == 0, "flux loom sample --lora",
                         (run.stdout + run.stderr).strip().replace("\n", "; ")[:400]):
        return
    pipe = FluxPipeline.from_pretrained(model_dir)
    pipe.load_lora_weights(folder, weight_name=weight_name)
    want = pipe(prompt=settings["prompt"], height=settings["height"], width=settings["width"],
                num_inference_steps=settings["steps"], guidance_scale=settings["guidance"],
                max_sequence_length=settings["tokens"], output_type="np",
                generator=torch.Generator().manual_seed(settings["seed"])).images[0]
    got = np.asarray(Image.open(os.path.join(out, f"sample_{settings['seed']}.png")),
                     dtype=np.float64)
    if not checks.report(got.shape == want.shape, "flux loom sample image size",
                         f"{got.shape} vs diffusers {want.shape}"):
        return
    err = np.abs(got - np.round(want * 255)).max()
    checks.report(err <= 1, "flux loom sample vs FluxPipeline with the LoRA",
                  f"max difference {err:.0f} of 255 (at most 1)")


def main(exporter, ref, loom=None):
    torch.manual_seed(0)
    torch.set_num_threads(min(4, os.cpu_count() or 1))
    diffusers.utils.logging.set_verbosity_warning()
    diffusers.utils.logging.disable_progress_bar()
    transformers.utils.logging.disable_progress_bar()
    capture = WarningCapture()
    logging.getLogger("diffusers").addHandler(capture)
    logging.getLogger("peft").addHandler(capture)

    checks = Checks()
    with tempfile.TemporaryDirectory() as tmp:
        for model, pipeline_class, case, variants, layouts in MODELS:
            model_dir = os.path.join(ref, model)
            inputs_path = os.path.join(ref, "cases", f"{case}.inputs.safetensors")
            folder = os.path.join(tmp, model)
            run = subprocess.run([exporter, model_dir, inputs_path, folder],
                                 capture_output=True, text=True)
            if not checks.report(run.returncode == 0, f"{model} lora_interop_export",
                                 (run.stdout + run.stderr).strip().replace("\n", "; ")):
                continue
            inputs = load_file(inputs_path)
            for variant in variants:
                loom_out = load_file(os.path.join(folder, f"{variant}.output.safetensors"))["sample"]
                for layout in layouts:
                    weight_name = f"{variant}.{layout}.safetensors"
                    check_file(checks, pipeline_class, model_dir, folder, weight_name, inputs,
                               loom_out, capture)
                    if loom and pipeline_class is FluxPipeline:
                        check_flux_sample(checks, loom, model_dir, folder, weight_name, tmp)
    print(f"{checks.passed} passed, {checks.failed} failed")
    return 0 if checks.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
