#!/usr/bin/env bash
# The GPU check (issue 17, docs/GPU.md): one command, run on a machine with an NVIDIA GPU, that
# builds loom there against that machine's torch and the bundle of its missing C++ libraries
# (scripts/gpu_bundle.sh, made beforehand on Debian 12), runs the `gpu`-labelled tests, then the
# CUDA scenarios of scripts/gpu/scenarios.py on an SD-1.5-sized UNet made there, and writes
# $OUT/results.json, $OUT/results.md and $OUT/gpu_check.log.
#
# Every part has its own time limit (and the whole check one of 8 minutes), so a hang costs one
# part, not the machine's budget; a part that fails or times out is recorded and the next runs.
#
#   scripts/gpu_check.sh                on the GPU machine (the tree + gpu_bundle/ copied there)
#   GPU_CHECK_DRY=1 scripts/gpu_check.sh
#                                       the same steps here, at toy sizes on sim / cpu (CI's
#                                       proof of the script, the bundle and the output format);
#                                       its build part compiles nothing: it checks the bundle
#                                       with the objects of an existing build (GPU_CHECK_OBJECTS,
#                                       scripts/gpu/bundle_relink.py)
#
#   OUT=dir                 where results go (default: build/gpu_check)
#   PYTHON=python           the Python with torch (default: python3; dry: .venv/bin/python)
#   GPU_BUNDLE_DIR=dir      the bundle (default: gpu_bundle)
#   GPU_CHECK_BUILD=dir     the build folder (default: build-gpu; dry: build/gpu_check_dry)
#   GPU_CHECK_OBJECTS=dir   dry run: the built tree whose objects are relinked (default: build)
#   GPU_CHECK_PARTS="..."   only these parts (names as in the table below), for reruns
set -uo pipefail  # not -e: one failing part must not stop the others

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DRY="${GPU_CHECK_DRY:-0}"
if [[ "$DRY" == 1 ]]; then
  PY="${PYTHON:-$ROOT/.venv/bin/python}"
  BUILD="${GPU_CHECK_BUILD:-$ROOT/build/gpu_check_dry}"
  OBJECTS="${GPU_CHECK_OBJECTS:-$ROOT/build}"
  TOTAL_LIMIT=1800
else
  PY="${PYTHON:-python3}"
  BUILD="${GPU_CHECK_BUILD:-$ROOT/build-gpu}"
  TOTAL_LIMIT=480
fi
OUT="${OUT:-$ROOT/build/gpu_check}"
BUNDLE="${GPU_BUNDLE_DIR:-$ROOT/gpu_bundle}"
WORK="$BUILD/gpu_check_work"
LOOM="$BUILD/src/cli/loom"
LOG="$OUT/gpu_check.log"
STARTED=$(date +%s)

mkdir -p "$OUT" "$WORK/parts"
if [[ "${1:-}" != --part ]]; then  # a fresh check; a part run by the check appends
  rm -f "$WORK"/parts/*.json "$WORK"/parts/*.rc
  : >"$LOG"
fi
say() { printf '[gpu_check] %s\n' "$*" | tee -a "$LOG"; }

# The parts, with their time limits in seconds on the GPU (16 cores) and in the dry run.
#   name        gpu   dry
PARTS=(
  "build        180   600"
  "gpu_tests     40   300"
  "models        30   120"
  "step_oom      30   300"
  "sample_oom    30   300"
  "low_vram      40   300"
  "streamed_blocks 60 400"
  "throughput   110   600"
  "dirty         15   120"
  "dist_one_rank 25   180"
)

# Runs one part under its limit (and what is left of the whole check's), records
# WORK/parts/<name>.status.json; the part's output is appended to the log.
run_part() {
  local name="$1" limit="$2"; shift 2
  local left=$((TOTAL_LIMIT - ($(date +%s) - STARTED)))
  if ((left < limit)); then limit=$((left > 0 ? left : 0)); fi
  local t0 rc
  t0=$(date +%s)
  if ((limit <= 0)); then
    rc=124
    say "$name: skipped, the check's $TOTAL_LIMIT s are spent"
  else
    say "$name: started (limit ${limit} s)"
    {
      echo "----- $name"
      timeout --kill-after=5 "$limit" "$@" 2>&1
      echo "rc=$?" >"$WORK/parts/$name.rc"
    } >>"$LOG" 2>&1
    rc=$(sed 's/rc=//' "$WORK/parts/$name.rc")
  fi
  local seconds=$(($(date +%s) - t0))
  printf '{"part": "%s", "rc": %s, "seconds": %s, "limit": %s, "timed_out": %s}\n' \
    "$name" "$rc" "$seconds" "$limit" "$([[ $rc == 124 || $rc == 137 ]] && echo true || echo false)" \
    >"$WORK/parts/$name.status.json"
  say "$name: rc $rc in ${seconds} s"
  return "$rc"
}

wanted() {
  [[ -z "${GPU_CHECK_PARTS:-}" ]] && return 0
  [[ " $GPU_CHECK_PARTS " == *" $1 "* ]]
}

limit_of() {
  local row
  for row in "${PARTS[@]}"; do
    read -r n gpu dry <<<"$row"
    if [[ "$n" == "$1" ]]; then [[ "$DRY" == 1 ]] && echo "$dry" || echo "$gpu"; return; fi
  done
}

part_build() {
  local torch_cmake prefix="$BUNDLE/prefix"
  [[ -d "$prefix" ]] || { echo "no $prefix: run scripts/gpu_bundle.sh first (docs/GPU.md)"; return 1; }
  bash scripts/gpu/relocate_prefix.sh "$prefix" || return 1
  torch_cmake="$("$PY" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')" || return 1
  cmake -G Ninja -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$torch_cmake" -DLOOM_DEPS_PREFIX="$prefix" || return 1
  local deps=()
  if [[ "$DRY" == 1 ]]; then
    # Here loom is already built (OBJECTS): its units' includes are checked against the prefix
    # by the preprocessor and its objects linked against the prefix's libraries, instead of a
    # second compilation (issue 43). The GPU machine, with no build yet, compiles.
    [[ -x "$OBJECTS/src/cli/loom" ]] || { echo "no $OBJECTS/src/cli/loom: build loom first"; return 1; }
    "$PY" scripts/gpu/bundle_relink.py "$BUILD" "$OBJECTS" "$prefix" "$BUILD/bundle_headers.txt" \
      loom $(gpu_test_targets) || return 1
    deps=(--deps "$BUILD/bundle_headers.txt")
  else
    cmake --build "$BUILD" --target loom $(gpu_test_targets) -- -j"$(nproc)" || return 1
  fi
  # Nothing of the system's copies of the bundled libraries was used (on the GPU machine there
  # are none; here there are, so this is what proves the bundle complete).
  bash scripts/gpu/check_bundle_build.sh "$BUILD" "$prefix" "${deps[@]}"
}

# The test executables whose tests carry the `gpu` label.
gpu_test_targets() {
  grep -rl 'LABEL gpu' tests --include=CMakeLists.txt | xargs sed -n 's/.*loom_test_suite(\([a-z0-9_]*\) LABEL gpu.*/\1/p'
}

part_gpu_tests() {
  ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout 60
}

part_models() {
  # diffusers travels as a wheel (the GPU machine has no registry): a wheel is a zip archive,
  # unpacked onto PYTHONPATH without pip.
  rm -rf "$WORK/pylib" && mkdir -p "$WORK/pylib"
  local whl wheels=("$BUNDLE"/wheels/*.whl)
  [[ -e "${wheels[0]}" ]] || { echo "no wheels in $BUNDLE/wheels"; return 1; }
  # Pillow is compiled for one Python (3.12): unpacked only where the Python has none, so it
  # never hides a working one.
  if ! "$PY" -c 'import PIL' 2>/dev/null; then wheels+=("$BUNDLE"/wheels/fallback/pillow-*.whl); fi
  for whl in "${wheels[@]}"; do
    "$PY" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
      "$whl" "$WORK/pylib" || return 1
  done
  if [[ "$DRY" == 1 ]]; then
    "$PY" scripts/gpu/make_models.py "$WORK/model" --unet toy --dtype fp32
  else
    "$PY" scripts/gpu/make_models.py "$WORK/model" --unet sd15 --dtype bf16
  fi
}

part_scenario() {
  local dry=()
  [[ "$DRY" == 1 ]] && dry=(--dry)
  "$PY" scripts/gpu/scenarios.py "$1" --loom "$LOOM" --model "$WORK/model" --work "$WORK" \
    --out "$WORK" "${dry[@]}"
}

export PYTHONPATH="$WORK/pylib${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

# `gpu_check.sh --part NAME`: one part, as run_part starts it under `timeout` (a shell function
# cannot be timed out; the script calling itself can).
if [[ "${1:-}" == --part ]]; then
  case "$2" in
    build) part_build ;;
    gpu_tests) part_gpu_tests ;;
    models) part_models ;;
    *) part_scenario "$2" ;;
  esac
  exit $?
fi

say "$([[ "$DRY" == 1 ]] && echo "dry run (sim/cpu, toy sizes)" || echo "GPU run") in $ROOT;" \
  "build $BUILD; results $OUT"
status=0
for row in "${PARTS[@]}"; do
  read -r name _ _ <<<"$row"
  wanted "$name" || continue
  run_part "$name" "$(limit_of "$name")" bash "$ROOT/scripts/gpu_check.sh" --part "$name" || status=1
  if [[ "$name" == build && $status != 0 ]]; then
    say "the build failed and every other part needs it; see $LOG"
    break
  fi
done

"$PY" scripts/gpu/report.py "$WORK" "$OUT" --dry "$DRY" --loom "$LOOM" | tee -a "$LOG"
((PIPESTATUS[0] != 0)) && status=1
say "done in $(($(date +%s) - STARTED)) s: $OUT/results.md, $OUT/results.json"
exit "$status"
