#!/usr/bin/env bash
# The optimizer step alone (issue 20): loom's AdamW, 8-bit AdamW and Prodigy against torch's
# AdamW, bitsandbytes' AdamW8bit and prodigyopt's Prodigy on the same LoRA shapes (the rank-RANK
# LoRA of BLOCKS Flux.1-dev double-stream blocks), on the CPU, equal threads. Prints each
# optimizer's state bytes per parameter and median step time, loom and reference side by side.
#
#   scripts/bench_optim.sh [REPEATS=5] [RANK=16] [BLOCKS=2] [THREADS=2]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
REPEATS="${1:-5}"; RANK="${2:-16}"; BLOCKS="${3:-2}"; THREADS="${4:-2}"
BIN="${LOOM_BUILD_DIR:-build}/bench/bench_optimizer_step"
cmake --build "${LOOM_BUILD_DIR:-build}" --target bench_optimizer_step >/dev/null  # not in the default build
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS"
loom=$("$BIN" "$THREADS" "$REPEATS" "$RANK" "$BLOCKS")
ref=$(.venv/bin/python bench/optimizer_step.py "$THREADS" "$REPEATS" "$RANK" "$BLOCKS" 2>/dev/null)
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "optimizer step on a rank-$RANK LoRA of $BLOCKS Flux.1-dev double blocks, $THREADS threads," \
  "median of $REPEATS steps:"
echo "| optimizer | parameters | loom state B/param | reference state B/param | loom step | reference step | ratio |"
echo "|---|---|---|---|---|---|---|"
for name in adamw adamw8bit prodigy; do
  lt=$(grep "^$name " <<<"$loom" | awk '{print $7}' | median)
  rt=$(grep "^$name " <<<"$ref" | awk '{print $7}' | median)
  params=$(grep "^$name " <<<"$loom" | tail -1 | awk '{print $5}')
  lb=$(grep "^$name " <<<"$loom" | tail -1 | awk '{print $3}')
  rb=$(grep "^$name " <<<"$ref" | tail -1 | awk '{print $3}')
  awk -v n="$name" -v p="$params" -v lb="$lb" -v rb="$rb" -v lt="$lt" -v rt="$rt" 'BEGIN {
    printf "| %s | %d | %.3f | %.3f | %.1f ms | %.1f ms | %.2f |\n", n, p, lb / p, rb / p,
      lt * 1000, rt * 1000, rt / lt }'
done
