#!/usr/bin/env bash
# A Wan LoRA training step on this CPU (issue 19): loom against diffusers + peft on the same
# Wan-shaped transformer (bench/make_bench_wan.py), equal threads, batch, clip, rank and targets,
# interleaved runs; then the step's peak memory on `sim` for clips of 1, 5, 9, 17 and 33 frames,
# with and without gradient checkpointing. docs/BENCHMARKS.md records both.
#
#   scripts/bench_wan.sh [ROUNDS=5] [REPEATS=3] [THREADS=2] [BATCH=1] [FRAMES=9] [LATENT=16] [TOKENS=64] [RANK=16]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ROUNDS="${1:-5}"; REPEATS="${2:-3}"; THREADS="${3:-2}"; BATCH="${4:-1}"; FRAMES="${5:-9}"
LATENT="${6:-16}"; TOKENS="${7:-64}"; RANK="${8:-16}"
PY=.venv/bin/python
BIN="${LOOM_BUILD_DIR:-build}/bench/bench_wan_lora_step"
cmake --build "${LOOM_BUILD_DIR:-build}" --target bench_wan_lora_step >/dev/null  # not in the default build
MODEL="${LOOM_BUILD_DIR:-build}/bench_wan"
[ -f "$MODEL/transformer/config.json" ] || "$PY" bench/make_bench_wan.py "$MODEL"
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS"
latent_frames() { echo $(( ($1 - 1) / 4 + 1 )); }  # the VAE's 1 + 4k frames -> 1 + k
args=("$MODEL" "$THREADS" "$REPEATS" "$BATCH" "$(latent_frames "$FRAMES")" "$LATENT" "$TOKENS" "$RANK")
source "$ROOT/scripts/bench_lib.sh"
for r in $(seq "$ROUNDS"); do
  collect loom_times loom_phases "$BIN" "${args[@]}"
  collect ref_times ref_phases "$PY" bench/wan_lora_step.py "${args[@]}"
done
lf=$(latent_frames "$FRAMES")
echo "Wan LoRA step (fwd + bwd + AdamW), batch $BATCH, $FRAMES frames ($lf latent) of" \
  "${LATENT}x${LATENT} latents ($((lf * LATENT * LATENT / 4)) video + $TOKENS text tokens)," \
  "rank $RANK, $THREADS threads, ${#loom_times[@]} steps each, interleaved:"
print_comparison

echo "Peak memory of one step on sim (batch $BATCH, ${LATENT}x${LATENT} latents, rank $RANK), MiB:"
echo "  frames  latent frames  plain  checkpointing"
for frames in 1 5 9 17 33; do
  lf=$(latent_frames "$frames")
  peak() { "$BIN" "$MODEL" "$THREADS" 1 "$BATCH" "$lf" "$LATENT" "$TOKENS" "$RANK" sim "$1" |
           awk '$1 == "peak_bytes" {printf "%.1f", $2 / 1048576}'; }
  printf '  %6d  %13d  %5s  %13s\n' "$frames" "$lf" "$(peak 0)" "$(peak 1)"
done
