#!/usr/bin/env bash
# UNet forward+backward on this CPU: loom against the same diffusers UNet in PyTorch, equal
# threads, interleaved runs; plus the sim device's peak memory with and without gradient
# checkpointing. Prints medians and the ratio (docs/BENCHMARKS.md records the output).
#
#   scripts/bench_unet.sh [ROUNDS=5] [REPEATS=3] [THREADS=2] [BATCH=1] [SIZE=32]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ROUNDS="${1:-5}"; REPEATS="${2:-3}"; THREADS="${3:-2}"; BATCH="${4:-1}"; SIZE="${5:-32}"
PY=.venv/bin/python
BIN="${LOOM_BUILD_DIR:-build}/bench/bench_unet_step"
cmake --build "${LOOM_BUILD_DIR:-build}" --target bench_unet_step >/dev/null  # not in the default build
MODEL="${LOOM_BUILD_DIR:-build}/bench_unet"
[ -f "$MODEL/unet/config.json" ] || "$PY" bench/make_bench_unet.py "$MODEL"
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS"
loom_times=(); ref_times=()
for r in $(seq "$ROUNDS"); do
  while read -r _ s; do loom_times+=("$s"); done < <("$BIN" "$MODEL" "$THREADS" "$REPEATS" "$BATCH" "$SIZE")
  while read -r _ s; do ref_times+=("$s"); done < <("$PY" bench/unet_step.py "$MODEL" "$THREADS" "$REPEATS" "$BATCH" "$SIZE")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
lm=$(median "${loom_times[@]}"); pm=$(median "${ref_times[@]}")
echo "UNet fwd+bwd, batch $BATCH, ${SIZE}x${SIZE} latents, $THREADS threads, ${#loom_times[@]} steps each, interleaved:"
echo "  loom      median $(printf '%.4f' "$lm") s"
echo "  diffusers median $(printf '%.4f' "$pm") s"
echo "  speed ratio (diffusers time / loom time): $(awk -v a="$pm" -v b="$lm" 'BEGIN{printf "%.3f", a/b}')"
echo "Peak device memory of one fwd+bwd at 64x64 latents on the sim device:"
"$BIN" "$MODEL" "$THREADS" 0 1 64 --memory | awk '{printf "  %-13s %.2f MiB\n", $2, $3/1048576}'
