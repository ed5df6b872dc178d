#!/usr/bin/env bash
# A Flux LoRA training step on this CPU (issue 18): loom against diffusers + peft on the same
# Flux-shaped transformer (bench/make_bench_flux.py), equal threads, batch, resolution, rank and
# targets, interleaved runs. Prints medians and the it/s ratio (docs/BENCHMARKS.md records it).
#
#   scripts/bench_flux.sh [ROUNDS=5] [REPEATS=3] [THREADS=2] [BATCH=1] [LATENT=32] [TOKENS=64] [RANK=16]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ROUNDS="${1:-5}"; REPEATS="${2:-3}"; THREADS="${3:-2}"; BATCH="${4:-1}"; LATENT="${5:-32}"
TOKENS="${6:-64}"; RANK="${7:-16}"
PY=.venv/bin/python
BIN="${LOOM_BUILD_DIR:-build}/bench/bench_flux_lora_step"
MODEL="${LOOM_BUILD_DIR:-build}/bench_flux"
[ -f "$MODEL/transformer/config.json" ] || "$PY" bench/make_bench_flux.py "$MODEL"
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS"
args=("$MODEL" "$THREADS" "$REPEATS" "$BATCH" "$LATENT" "$TOKENS" "$RANK")
loom_times=(); ref_times=(); loom_phases=(); ref_phases=()
# Each side prints "step_seconds S" and "phase_seconds forward F backward B optimizer O" per step.
collect() {  # collect TIMES_ARRAY PHASES_ARRAY COMMAND...
  local -n times=$1 phases=$2; shift 2
  while read -r what a b c d e f; do
    if [ "$what" = step_seconds ]; then times+=("$a"); else phases+=("$b $d $f"); fi
  done < <("$@")
}
for r in $(seq "$ROUNDS"); do
  collect loom_times loom_phases "$BIN" "${args[@]}"
  collect ref_times ref_phases "$PY" bench/flux_lora_step.py "${args[@]}"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# phase_medians "F B O"...: the median of each phase, "F B O".
phase_medians() {
  local f=() b=() o=()
  for p in "$@"; do read -r x y z <<<"$p"; f+=("$x"); b+=("$y"); o+=("$z"); done
  printf 'forward %.4f s, backward %.4f s, optimizer %.4f s' "$(median "${f[@]}")" \
    "$(median "${b[@]}")" "$(median "${o[@]}")"
}
lm=$(median "${loom_times[@]}"); pm=$(median "${ref_times[@]}")
echo "Flux LoRA step (fwd + bwd + AdamW), batch $BATCH, ${LATENT}x${LATENT} latents" \
  "($((LATENT * LATENT / 4)) image + $TOKENS text tokens), rank $RANK, $THREADS threads," \
  "${#loom_times[@]} steps each, interleaved:"
echo "  loom           median $(printf '%.4f' "$lm") s ($(awk -v a="$lm" 'BEGIN{printf "%.2f", 1/a}') it/s)"
echo "  diffusers+peft median $(printf '%.4f' "$pm") s ($(awk -v a="$pm" 'BEGIN{printf "%.2f", 1/a}') it/s)"
echo "  phases, medians: loom $(phase_medians "${loom_phases[@]}")"
echo "                   diffusers+peft $(phase_medians "${ref_phases[@]}")"
echo "  it/s ratio (loom / diffusers+peft): $(awk -v a="$pm" -v b="$lm" 'BEGIN{printf "%.3f", a/b}')"
