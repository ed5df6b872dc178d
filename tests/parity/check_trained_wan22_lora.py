#!/usr/bin/env python3
"""A Wan 2.2 14B LoRA pair loom trained loads into diffusers' WanPipeline as its model card says:
the high-noise file with `load_lora_weights`, the low-noise one with `load_into_transformer_2`,
each without warnings, each adapter on its own expert covering exactly the file's modules (every
key used, in ai-toolkit's diffusion_model.blocks.N.self_attn.q layout), and each module's weight
change B @ A equal to the file's.

Usage: check_trained_wan22_lora.py MODEL_DIR HIGH_NOISE_FILE LOW_NOISE_FILE
       (either file may be "-" when that expert was not trained; exit 0 when every check passes)
"""

import logging
import os
import sys
import warnings

from diffusers import WanPipeline
from safetensors.torch import load_file

import comfy_key_map
from check_lora_interop import (BENIGN, DELTA_TOLERANCE, Checks, WarningCapture, diffusers_deltas,
                                first, wan_original_file_deltas)


def main(model_dir, high, low):
    checks = Checks()
    capture = WarningCapture()
    logging.getLogger("diffusers").addHandler(capture)
    logging.getLogger("peft").addHandler(capture)
    pipe = WanPipeline.from_pretrained(model_dir)
    checks.report(pipe.transformer_2 is not None and pipe.config.boundary_ratio is not None,
                  "the folder is a two-expert Wan 2.2 pipeline")
    for path, expert, into_2 in ((high, "transformer", False), (low, "transformer_2", True)):
        if path == "-":
            continue
        what = f"{expert} {os.path.basename(path)}"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                kwargs = {"load_into_transformer_2": True} if into_2 else {}
                pipe.load_lora_weights(os.path.dirname(path), weight_name=os.path.basename(path),
                                       adapter_name=expert, **kwargs)
            except Exception as e:  # noqa: BLE001 - reported as the check's failure
                checks.report(False, f"{what} load_lora_weights", f"{type(e).__name__}: {e}"[:400])
                continue
        noise = [m for m in capture.messages if not BENIGN.search(m)] + [
            f"{w.category.__name__}: {w.message}" for w in caught
            if "/diffusers/" in w.filename or "/peft/" in w.filename]
        capture.messages.clear()
        checks.report(not noise, f"{what} load_lora_weights without warnings",
                      "; ".join(m[:300] for m in noise))
        want, num_keys, stray = wan_original_file_deltas(path)
        module = getattr(pipe, expert)
        got = diffusers_deltas(module, expert, False)
        missing, extra = set(want) - set(got), set(got) - set(want)
        checks.report(not missing and not extra and not stray and want, f"{what} every key used",
                      f"{len(got)} modules loaded, {len(want)} in the file ({num_keys} keys)"
                      + (f"; not loaded: {first(missing)}" if missing else "")
                      + (f"; not in the file: {first(extra)}" if extra else ""))
        stems = comfy_key_map.generic_stems(comfy_key_map.wan_comfy_names(module))
        _, missed = comfy_key_map.loaded_keys(load_file(path), stems)
        checks.report(not missed, f"{what} every key in ComfyUI's key map",
                      f"not loaded: {first(missed)}" if missed else f"{num_keys} keys")
        other = getattr(pipe, "transformer_2" if expert == "transformer" else "transformer")
        checks.report(not diffusers_deltas(other, expert, False),
                      f"{what} loaded into its own expert only")
        worst = max((((got[n] - want[n]).abs().max() / want[n].abs().max().clamp_min(1e-30)).item()
                     for n in set(want) & set(got)), default=0.0)
        checks.report(worst <= DELTA_TOLERANCE, f"{what} per-module weight change",
                      f"max relative error {worst:.3g}")
    print(f"{checks.passed} passed, {checks.failed} failed")
    return 0 if checks.failed == 0 and checks.passed > 0 else 1


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
