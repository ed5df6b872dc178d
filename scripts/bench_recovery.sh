#!/usr/bin/env bash
# Recovery latency and steps lost of the OOM guard for scenarios B and D, beside what
# ai-toolkit's documented OOM handling would lose in the same runs (docs/BENCHMARKS.md records
# the output). Needs the build (scripts/setup.sh).
#
#   scripts/bench_recovery.sh [STEPS=40]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${LOOM_BUILD_DIR:-build}"
exec .venv/bin/python bench/recovery.py "$BUILD/src/cli/loom" "$BUILD/tests/train/make_tiny_fixture" \
  "$BUILD/bench_recovery" "${1:-40}"
