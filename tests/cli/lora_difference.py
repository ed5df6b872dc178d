#!/usr/bin/env python3
"""The largest absolute difference between two LoRA files' tensors, for the end-to-end scripts:
prints "max abs difference D over N tensors" and exits 0 when D is at most --max (1 when it is
larger or the keys differ, 2 when a file cannot be read).

It reads with safetensors.numpy, not safetensors.torch: importing torch costs seconds of CPU in
every call, and the scripts save their LoRAs in float32 or float16, which numpy holds exactly.

    lora_difference.py A.safetensors B.safetensors [--max 1e-5]
"""
import argparse
import sys

import numpy as np
from safetensors.numpy import load_file


def load(path):
    try:
        return load_file(path)
    except (OSError, TypeError, ValueError) as e:  # a missing file; bf16, which numpy lacks
        sys.exit(f"error: cannot read {path} as float32/float16 safetensors: {e}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--max", type=float, default=1e-5, help="the largest difference that passes")
    args = parser.parse_args()
    a, b = load(args.a), load(args.b)
    if a.keys() != b.keys():
        print(f"different keys: {sorted(a.keys() ^ b.keys())[:5]}")
        return 1
    err = max(float(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)).max()) for k in a)
    print(f"max abs difference {err:.3g} over {len(a)} tensors")
    return 0 if err <= args.max else 1


if __name__ == "__main__":
    sys.exit(main())
