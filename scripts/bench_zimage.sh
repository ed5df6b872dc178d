#!/usr/bin/env bash
# A Z-Image LoRA training step on this CPU (issue 42): loom against diffusers + peft on the same
# Z-Image-shaped transformer (bench/make_bench_zimage.py), equal threads, batch, resolution, rank
# and targets, interleaved runs. Prints medians and the it/s ratio (docs/BENCHMARKS.md records
# it).
#
#   scripts/bench_zimage.sh [ROUNDS=5] [REPEATS=3] [THREADS=2] [BATCH=1] [LATENT=32] [TOKENS=64] [RANK=16]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ROUNDS="${1:-5}"; REPEATS="${2:-3}"; THREADS="${3:-2}"; BATCH="${4:-1}"; LATENT="${5:-32}"
TOKENS="${6:-64}"; RANK="${7:-16}"
PY=.venv/bin/python
BIN="${LOOM_BUILD_DIR:-build}/bench/bench_zimage_lora_step"
cmake --build "${LOOM_BUILD_DIR:-build}" --target bench_zimage_lora_step >/dev/null  # not in the default build
MODEL="${LOOM_BUILD_DIR:-build}/bench_zimage"
[ -f "$MODEL/transformer/config.json" ] || "$PY" bench/make_bench_zimage.py "$MODEL"
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS"
args=("$MODEL" "$THREADS" "$REPEATS" "$BATCH" "$LATENT" "$TOKENS" "$RANK")
source "$ROOT/scripts/bench_lib.sh"
for r in $(seq "$ROUNDS"); do
  collect loom_times loom_phases "$BIN" "${args[@]}"
  collect ref_times ref_phases "$PY" bench/zimage_lora_step.py "${args[@]}"
done
echo "zimage LoRA step (fwd + bwd + AdamW), batch $BATCH, ${LATENT}x${LATENT} latents" \
  "($((LATENT * LATENT / 4)) image tokens + a caption of $((TOKENS / 4))), rank $RANK," \
  "$THREADS threads, ${#loom_times[@]} steps each, interleaved:"
print_comparison
