#!/usr/bin/env bash
# The benchmarks of docs/BENCHMARKS.md from one command (issue 10): loom against the Python
# reference (diffusers UNet + peft LoRA) at equal settings on two model sizes, the OOM guard's
# recovery figures, and the ladder's efficiency over a grid of budgets ("all"); also the
# low_vram sub-modes and Wan 2.2's idle expert on the host on their own. Needs the build (scripts/setup.sh). Work folders go under the
# build folder.
#
#   scripts/bench.sh [all|throughput|recovery|ladder|low_vram|idle_expert|report]
#   ROUNDS=3 STEPS=30 THREADS=2 scripts/bench.sh throughput
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export LOOM_SOURCE_DIR="$ROOT"  # where make_tiny_fixture finds its tokenizer
BUILD="${LOOM_BUILD_DIR:-build}"
LOOM="$BUILD/src/cli/loom"
PY=.venv/bin/python
WHAT="${1:-all}"
case "$WHAT" in all|throughput|recovery|ladder|low_vram|idle_expert|report) ;; *)
  echo "usage: scripts/bench.sh [all|throughput|recovery|ladder|low_vram|idle_expert|report]" >&2
  exit 2;;
esac
[[ -x "$LOOM" ]] || { echo "no $LOOM: build first (scripts/setup.sh)" >&2; exit 1; }
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs);" \
  "$(date -u +%Y-%m-%d); $("$LOOM" --version | head -1)"

if [[ "$WHAT" == all || "$WHAT" == throughput ]]; then
  echo; echo "== loom against the Python reference (bench/throughput.py)"
  $PY bench/throughput.py "$LOOM" datasets/loom-tiny-sd "$BUILD/bench_throughput" \
    "${ROUNDS:-3}" "${STEPS:-30}" "${THREADS:-2}"
fi
if [[ "$WHAT" == all || "$WHAT" == recovery ]]; then
  echo; echo "== OOM recovery (bench/recovery.py)"
  $PY bench/recovery.py "$LOOM" "$BUILD/tests/train/make_tiny_fixture" "$BUILD/bench_recovery" \
    "${RECOVERY_STEPS:-40}"
fi
if [[ "$WHAT" == all || "$WHAT" == ladder ]]; then
  echo; echo "== ladder efficiency (bench/ladder_efficiency.py)"
  $PY bench/ladder_efficiency.py "$LOOM" datasets/loom-tiny-sd "$BUILD/bench_ladder" \
    "${LADDER_STEPS:-20}" "${LADDER_REPEATS:-3}" "${LADDER_SIZES:-tiny,small}"
fi
if [[ "$WHAT" == low_vram ]]; then
  echo; echo "== low_vram sub-modes (bench/low_vram.py)"
  $PY bench/low_vram.py "$LOOM" "$BUILD/tests/train/make_tiny_fixture" "$BUILD/bench_low_vram" \
    "${LOW_VRAM_STEPS:-12}" "${LOW_VRAM_SIZE:-64}"
fi
if [[ "$WHAT" == idle_expert ]]; then
  # The tiny two-expert Wan 2.2 that the parity.reference test writes under the build folder.
  WAN22="$BUILD/parity/wan22/pipeline"
  [[ -d "$WAN22" ]] || { echo "no $WAN22: run ctest -R parity.reference first" >&2; exit 1; }
  for every in 1 10; do
    echo; echo "== the idle expert on the host, switch_boundary_every $every (bench/idle_expert.py)"
    (cd bench && ../$PY idle_expert.py "../$LOOM" "../$WAN22" "../$BUILD/bench_idle_expert" \
      "${IDLE_EXPERT_STEPS:-40}" "$every")
  done
fi
if [[ "$WHAT" == all || "$WHAT" == report ]]; then
  echo; echo "== loom report on an empty, a failed and a 100k-step run (bench/report_speed.py)"
  $PY bench/report_speed.py "$LOOM" "$BUILD/bench_report" "${REPORT_REPEATS:-5}"
fi
