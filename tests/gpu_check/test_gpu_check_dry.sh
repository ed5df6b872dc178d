#!/usr/bin/env bash
# The GPU check's dry run (issue 17): scripts/gpu_bundle.sh makes the bundle, then
# GPU_CHECK_DRY=1 scripts/gpu_check.sh checks it with BUILD's objects: every unit's includes
# resolve inside the bundle's prefix, loom and the `gpu` tests link and load against it (its
# check_bundle_build step fails if a header or library of the system's copies was used); it runs
# the `gpu` tests (they skip without a GPU) and every scenario at toy sizes on sim/cpu with the
# relinked loom. Here we assert what a GPU run will rely on: every part passed, and results.json /
# results.md have the shape docs/GPU.md describes.
#
#   test_gpu_check_dry.sh ROOT WORKDIR BUILD
set -euo pipefail
ROOT="$1"
WORK="$2"
OBJECTS="$3"
rm -rf "$WORK/out"
mkdir -p "$WORK"

fail() { echo "FAIL: $*" >&2; exit 1; }

GPU_BUNDLE_DIR="$WORK/bundle" bash "$ROOT/scripts/gpu_bundle.sh" || fail "gpu_bundle.sh failed"

rc=0
GPU_CHECK_DRY=1 OUT="$WORK/out" GPU_BUNDLE_DIR="$WORK/bundle" GPU_CHECK_BUILD="$WORK/build" \
  GPU_CHECK_OBJECTS="$OBJECTS" \
  bash "$ROOT/scripts/gpu_check.sh" || rc=$?
[[ -f "$WORK/out/gpu_check.log" ]] || fail "no gpu_check.log"
if ((rc != 0)); then
  tail -n 80 "$WORK/out/gpu_check.log" >&2
  fail "gpu_check.sh exited $rc"
fi

"$ROOT/.venv/bin/python" - "$WORK/out" <<'PY'
import json, os, sys
out = sys.argv[1]
r = json.load(open(os.path.join(out, "results.json")))
parts = ["build", "gpu_tests", "models", "step_oom", "sample_oom", "low_vram", "streamed_blocks",
         "throughput", "dirty", "dist_one_rank"]
assert r["dry_run"] is True, r["dry_run"]
for key in ("date", "machine", "loom", "parts", "verdict"):
    assert key in r, key
assert r["machine"]["torch"], r["machine"]
for p in parts:
    assert r["verdict"].get(p) == "pass", (p, r["verdict"].get(p))
    assert not r["parts"][p]["timed_out"], p  # a part's limit only catches a hang
step = r["parts"]["step_oom"]["scenario"]["result"]
assert step["steps_lost"] == 0 and step["ooms"] >= 1, step
sample = r["parts"]["sample_oom"]["scenario"]["result"]
assert all(k.startswith("sample.") for k in sample["knobs_changed"]), sample
assert r["parts"]["dirty"]["scenario"]["result"]["exit_code"] == 5
assert r["parts"]["dist_one_rank"]["scenario"]["result"]["backend"] == "gloo"
# metrics.jsonl carries the allocator's reserved peak (on sim: the allocated peak).
for level in r["parts"]["low_vram"]["scenario"]["result"]["levels"]:
    assert level["peak_reserved"] > 0 and level["peak_reserved"] >= level["peak_allocated"], level
md = open(os.path.join(out, "results.md")).read()
assert "| part | verdict | seconds (limit) | figures |" in md, md
for p in parts:
    assert f"| {p} | pass |" in md, (p, md)
# At most 8 files come back from the GPU machine: the check writes three.
assert sorted(os.listdir(out)) == ["gpu_check.log", "results.json", "results.md"], os.listdir(out)
print("dry run: every part passed;", md.splitlines()[0])
PY
