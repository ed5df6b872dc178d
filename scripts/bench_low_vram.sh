#!/usr/bin/env bash
# Peak device memory and step time of each low_vram sub-mode against the plain plan on the sim
# device, and the difference bf16 base weights make (docs/BENCHMARKS.md records the output).
#
#   scripts/bench_low_vram.sh [STEPS=12] [SIZE=64]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${LOOM_BUILD_DIR:-build}"
exec .venv/bin/python bench/low_vram.py "$BUILD/src/cli/loom" "$BUILD/tests/train/make_tiny_fixture" \
  "$BUILD/bench_low_vram" "${1:-12}" "${2:-64}"
