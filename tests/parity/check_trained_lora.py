#!/usr/bin/env python3
"""A LoRA file loom trained loads into the diffusers pipeline of its base model with every key
used: `load_lora_weights` without warnings, one adapter on the denoiser covering exactly the
file's modules, and each module's weight change B @ A equal to the file's.

Usage: check_trained_lora.py MODEL_DIR LORA_FILE   (exit 0 when every check passes)
"""

import logging
import os
import sys
import warnings

from diffusers import DiffusionPipeline

from check_lora_interop import (BENIGN, DELTA_TOLERANCE, Checks, WarningCapture, denoiser,
                                diffusers_deltas, file_deltas, first)


# The diffusers module names ComfyUI's Flux LoRA loader maps to its own layers
# (comfy/utils.py flux_to_diffusers, read by comfy/lora.py for "transformer.<module>" keys).
COMFY_FLUX_DOUBLE = {"attn.to_q", "attn.to_k", "attn.to_v", "attn.add_q_proj", "attn.add_k_proj",
                     "attn.add_v_proj", "attn.to_out.0", "attn.to_add_out", "norm1.linear",
                     "norm1_context.linear", "ff.net.0.proj", "ff.net.2", "ff_context.net.0.proj",
                     "ff_context.net.2"}
COMFY_FLUX_SINGLE = {"attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp", "proj_out", "norm.linear"}


def comfy_maps(module):
    """Whether ComfyUI's Flux key map has `module` (a transformer module path)."""
    parts = module.split(".", 2)
    if len(parts) < 3 or not parts[1].isdigit():
        return False
    table = {"transformer_blocks": COMFY_FLUX_DOUBLE,
             "single_transformer_blocks": COMFY_FLUX_SINGLE}.get(parts[0], set())
    return parts[2] in table


def main(model_dir, lora_file):
    checks = Checks()
    capture = WarningCapture()
    logging.getLogger("diffusers").addHandler(capture)
    logging.getLogger("peft").addHandler(capture)
    pipe = DiffusionPipeline.from_pretrained(model_dir)
    what = f"{type(pipe).__name__} {os.path.basename(lora_file)}"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
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
    if type(pipe).__name__ in ("FluxPipeline", "FluxKontextPipeline"):
        unmapped = [m for m in want if not comfy_maps(m)]
        checks.report(not unmapped, f"{what} every module in ComfyUI's Flux key map",
                      f"not mapped: {first(unmapped)}" if unmapped else f"{len(want)} modules")
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
