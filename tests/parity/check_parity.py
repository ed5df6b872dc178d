#!/usr/bin/env python3
"""Runs `loom eval` on every reference case make_reference.py wrote and compares the outputs with
diffusers'/transformers' (max absolute error within the issue's tolerances).

    check_parity.py LOOM_BINARY REF_DIR

Prints one line per tensor and a final 'N passed, N failed' line; exits 1 on any failure.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
from safetensors.numpy import load_file  # numpy: no torch import (seconds of CPU) to compare

# (case, component, model folder, tolerance)
CASES = [
    ("sd1_unet", "unet", "sd1", 1e-4),
    ("sd1_unet_odd_size", "unet", "sd1", 1e-4),
    ("sdxl_unet", "unet", "sdxl", 1e-4),
    ("vae_encode", "vae-encode", "sd1", 1e-4),
    ("vae_decode", "vae-decode", "sd1", 1e-4),
    ("sd1_text_encoder", "text-encoder", "sd1", 1e-5),
    ("sdxl_text_encoder", "text-encoder", "sdxl", 1e-5),
    ("sdxl_text_encoder_2", "text-encoder-2", "sdxl", 1e-5),
    # Flux (flux_reference.py) and the T5 family (t5_reference.py)
    ("flux_transformer", "transformer", "flux", 1e-4),
    ("flux_vae_encode", "vae-encode", "flux", 1e-4),
    ("flux_vae_decode", "vae-decode", "flux", 1e-4),
    ("t5_encoder", "text-encoder-2", "flux", 1e-5),
    ("t5_encoder", "t5-encoder", "t5", 1e-5),
    ("umt5_encoder", "t5-encoder", "umt5", 1e-5),
]


def main(loom, ref):
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for case, component, model, tol in CASES:
            inputs = os.path.join(ref, "cases", f"{case}.inputs.safetensors")
            out = os.path.join(tmp, f"{case}.out.safetensors")
            run = subprocess.run([loom, "eval", component, "--model", os.path.join(ref, model),
                                  "--inputs", inputs, "--out", out],
                                 capture_output=True, text=True)
            if run.returncode != 0:
                print(f"FAIL {case}: loom eval exited {run.returncode}: {run.stderr.strip()}")
                failed += 1
                continue
            got = load_file(out)
            expected = load_file(os.path.join(ref, "cases", f"{case}.expected.safetensors"))
            for name, want in expected.items():
                if name not in got:
                    print(f"FAIL {case}.{name}: loom wrote no such tensor")
                    failed += 1
                    continue
                have = got[name]
                if tuple(have.shape) != tuple(want.shape):
                    print(f"FAIL {case}.{name}: shape {tuple(have.shape)} != {tuple(want.shape)}")
                    failed += 1
                    continue
                err = float(np.abs(have.astype(np.float64) - want.astype(np.float64)).max())
                ok = err <= tol
                print(f"{'ok  ' if ok else 'FAIL'} {case}.{name}: max abs error {err:.3g} "
                      f"(tolerance {tol:g})")
                passed += ok
                failed += not ok
    # loom inspect reads the same folders: arch and parameter counts from the headers.
    for model, arch in [("sd1", "sd1"), ("sdxl", "sdxl"), ("flux", "flux")]:
        run = subprocess.run([loom, "inspect", os.path.join(ref, model)], capture_output=True,
                             text=True)
        described = run.stdout.replace(" (loom cannot train it yet)", "")
        ok = run.returncode == 0 and f"arch:     {arch}\n" in described and \
            "text_encoder" in run.stdout and "F32:" in run.stdout and \
            "cannot train it yet" not in run.stdout
        print(f"{'ok  ' if ok else 'FAIL'} loom inspect {model}")
        if not ok:
            print(run.stdout + run.stderr)
        passed += ok
        failed += not ok
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
