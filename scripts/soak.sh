#!/usr/bin/env bash
# The kill soak (issue 26): proves that resume is exact whatever moment a training dies.
#
#   scripts/soak.sh [N]        N trials (default 20) after `scripts/setup.sh`
#   SOAK_DIR=dir               work folder (default: a new temp folder, kept when a trial fails)
#   SOAK_SEED=s                seed of the kill times and victims (default: 1)
#
# A short job (the tiny test fixture, 16 steps at batch 2, a checkpoint every 2 steps, on `sim`)
# is first trained without interruption: the reference LoRA. Then each trial trains the same job
# in its own training folder under the supervisor (`loom train`), and at a random moment sends
# SIGKILL to the supervisor or to its training child (drawn at random) after a random number of
# finished steps and up to 200 ms more: in loading, a step or a save (every third trial waits
# for a save to be under way and kills the child then). A killed child is restarted by the supervisor; a killed supervisor's child checkpoints and
# stops. Then a plain rerun (`loom train --wait`) finishes the job. Every trial must end with a
# final LoRA byte-identical to the reference, and every checkpoint that claims to be complete
# (its COMPLETE marker) must load. Two more trials: the disk fills up in a save (the training
# folder on a small tmpfs; skipped where mounting is not allowed), and the newest checkpoint is
# truncated (resume falls back to the one before, with a warning).
# Prints one line per trial and a summary: trials, kills by phase and victim, the largest
# difference from the reference, the time taken. Exit 0 only when every trial passed.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
N="${1:-20}"
LOOM="$ROOT/build/src/cli/loom"
FIXTURE="$ROOT/build/tests/train/make_tiny_fixture"
export LOOM_SOURCE_DIR="$ROOT"  # where the fixture finds its tokenizer (tests/common/source_dir.h)
PY="$ROOT/.venv/bin/python"
for f in "$LOOM" "$FIXTURE" "$PY"; do
  [ -x "$f" ] || { echo "error: $f is missing; run scripts/setup.sh first" >&2; exit 2; }
done
W="${SOAK_DIR:-$(mktemp -d /tmp/loom-soak.XXXXXX)}"
mkdir -p "$W"
export LOOM_HOME="$W/home"  # its own stable-config store
RANDOM="${SOAK_SEED:-1}"
"$FIXTURE" "$W/fixture" >/dev/null || { echo "error: the fixture could not be made" >&2; exit 1; }

job() {  # job TRAINING_FOLDER
  cat <<YAML
job: extension
config:
  name: soak
  process:
    - type: sd_trainer
      training_folder: $1
      device: sim
      training_seed: 11
      network: {linear: 4, linear_alpha: 4}
      save: {save_every: 2, dtype: float32, max_step_saves_to_keep: 2}
      datasets:
        - folder_path: $W/fixture/data
          resolution: [64]
      train: {steps: 16, lr: 1e-3, batch_size: 2, gradient_checkpointing: false,
              disable_sampling: true}
      model: {name_or_path: $W/fixture/model, arch: sd1}
      oom: {vram_limit: 1GiB, probe: false, max_restarts: 5}
YAML
}

# compare FILE: the largest absolute difference of FILE's tensors from the reference's ("0" when
# byte-identical), or "missing".
compare() {
  [ -f "$1" ] || { echo missing; return; }
  cmp -s "$1" "$W/ref/soak/soak.safetensors" && { echo 0; return; }
  "$PY" - "$1" "$W/ref/soak/soak.safetensors" <<'PY'
import sys
from safetensors.numpy import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
if a.keys() != b.keys():
    print("keys-differ")
else:
    print(max(float(abs(a[k].astype("float64") - b[k].astype("float64")).max()) for k in a))
PY
}

# checkpoints_load RUN: every checkpoint with a COMPLETE marker parses (trainer.json, the
# safetensors file with the tensors trainer.json counts).
checkpoints_load() {
  "$PY" - "$1" <<'PY'
import json, os, sys
from safetensors.numpy import load_file
state = os.path.join(sys.argv[1], "state")
bad = []
for step in sorted(os.listdir(state)) if os.path.isdir(state) else []:
    d = os.path.join(state, step)
    if not os.path.exists(os.path.join(d, "COMPLETE")):
        continue
    try:
        meta = json.load(open(os.path.join(d, "trainer.json")))
        t = load_file(os.path.join(d, "state.safetensors"))
        assert sum(k.startswith("lora.") for k in t) == meta["lora"], "lora count"
        assert "rng_cpu" in t, "rng"
    except Exception as e:  # noqa: BLE001 - any failure is a finding
        bad.append(f"{step}: {e}")
print("; ".join(bad))
PY
}

# phase_of RUN: what the run was doing when it died, from what it left behind.
phase_of() {
  local run="$1"
  if compgen -G "$run/state/*" >/dev/null; then
    for d in "$run"/state/*/; do [ -e "$d/COMPLETE" ] || { echo save; return; }; done
  fi
  if compgen -G "$run/soak*.safetensors.tmp.*" >/dev/null ||
     compgen -G "$run/state/*/*.tmp.*" >/dev/null; then
    echo save; return
  fi
  [ -s "$run/metrics.jsonl" ] && echo step || echo load
}

# wait_for_steps RUN K PID: until RUN's metrics.jsonl has K lines (K = 0: until the run has
# started), or PID has ended.
wait_for_steps() {
  while kill -0 "$3" 2>/dev/null; do
    if [ "$2" -eq 0 ]; then [ -e "$1/events.jsonl" ] && return; fi
    [ "$(cat "$1/metrics.jsonl" 2>/dev/null | wc -l)" -ge "$2" ] && [ "$2" -gt 0 ] && return
    sleep 0.01
  done
}

# hunt_save RUN PARENT: once PARENT's training child runs, kills it with SIGKILL the moment RUN
# shows a save under way (a checkpoint folder without its COMPLETE marker, or a LoRA file's temp
# file). Prints the child's PID and "save" when it struck, nothing when the run ended first.
hunt_save() {
  local run="$1" parent="$2" child="" d
  while [ -z "$child" ] && kill -0 "$parent" 2>/dev/null; do child=$(pgrep -P "$parent" | head -1); done
  [ -n "$child" ] || return
  while kill -0 "$child" 2>/dev/null; do
    if compgen -G "$run/soak*.safetensors.tmp.*" >/dev/null; then
      kill -9 "$child"; echo "$child save"; return
    fi
    for d in "$run"/state/*/; do
      if [ -d "$d" ] && [ ! -e "$d/COMPLETE" ]; then kill -9 "$child"; echo "$child save"; return; fi
    done
  done
}

start=$(date +%s)
job "$W/ref" >"$W/ref.yaml"
t0=$(date +%s%N)
"$LOOM" train "$W/ref.yaml" >"$W/ref.log" 2>&1 || { echo "error: the reference run failed (see $W/ref.log)" >&2; exit 1; }
ref_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "reference: $W/ref/soak/soak.safetensors (${ref_ms} ms)"

pass=0; fail=0; max_diff=0
declare -A kills=()
record() {  # record NAME RESULT DIFF DETAIL
  if [ "$2" = ok ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
  case "$3" in 0|missing|keys-differ) ;; *) max_diff=$("$PY" -c "print(max($max_diff, $3))") ;; esac
  [ "$3" = 0 ] || [ "$2" != ok ] || true
  printf '%-10s %-4s diff %-10s %s\n' "$1" "$2" "$3" "$4"
}

for i in $(seq 1 "$N"); do
  tf="$W/t$i"; run="$tf/soak"
  job "$tf" >"$W/t$i.yaml"
  "$LOOM" train "$W/t$i.yaml" >"$W/t$i.first.log" 2>&1 &
  parent=$!
  t_start=$(date +%s%N)
  if [ $((i % 3)) -eq 0 ]; then
    # Every third trial hunts a save: the child dies the moment a save is seen under way.
    read -r pid phase < <(hunt_save "$run" "$parent")
    victim=child
    [ -n "${phase:-}" ] || phase=finished
  else
    # A random moment that does not depend on the machine's speed: after a random number of
    # finished steps (0: while loading), then up to 200 ms more.
    wait_for_steps "$run" $((RANDOM % 16)) "$parent"
    extra_ms=$((RANDOM % 200))
    sleep "0.$(printf '%03d' "$extra_ms")"
    child=$(pgrep -P "$parent" | head -1)
    if [ $((RANDOM % 2)) -eq 0 ] && [ -n "$child" ]; then victim=child; pid=$child; else victim=parent; pid=$parent; fi
    if kill -0 "$pid" 2>/dev/null; then
      kill -9 "$pid" 2>/dev/null
      phase=$(phase_of "$run")
    else
      phase=finished
    fi
  fi
  delay_ms=$(( ($(date +%s%N) - t_start) / 1000000 ))
  kills["$phase/$victim"]=$(( ${kills["$phase/$victim"]:-0} + 1 ))
  wait "$parent" 2>/dev/null
  broken=$(checkpoints_load "$run")
  "$LOOM" train --wait "$W/t$i.yaml" >"$W/t$i.rerun.log" 2>&1
  rc=$?
  diff=$(compare "$run/soak.safetensors")
  fallback=$(grep -c "cannot be loaded" "$W/t$i.rerun.log")
  if [ "$rc" -eq 0 ] && [ "$diff" = 0 ] && [ -z "$broken" ] && [ "$fallback" -eq 0 ]; then
    record "trial $i" ok "$diff" "killed the $victim after ${delay_ms} ms ($phase)"
    rm -rf "$tf"
  else
    record "trial $i" FAIL "$diff" "killed the $victim after ${delay_ms} ms ($phase): rerun exit $rc, broken checkpoints: '${broken}', fallbacks $fallback"
  fi
done

# The disk fills up in a save: the training folder on a tmpfs too small for the whole run. The
# failed save must not leave a checkpoint that claims to be complete; with room again, a rerun
# resumes and ends on the reference LoRA.
df_dir="$W/full"; mkdir -p "$df_dir"
if mount -t tmpfs -o size=1000k tmpfs "$df_dir" 2>/dev/null; then  # the run needs ~1.8 MB
  job "$df_dir" >"$W/full.yaml"
  "$LOOM" train "$W/full.yaml" >"$W/full.first.log" 2>&1
  rc1=$?
  enospc=$(grep -c -i "no space left" "$W/full.first.log")
  broken=$(checkpoints_load "$df_dir/soak")
  mount -o remount,size=64m "$df_dir"
  "$LOOM" train "$W/full.yaml" >"$W/full.rerun.log" 2>&1
  rc=$?
  diff=$(compare "$df_dir/soak/soak.safetensors")
  if [ "$rc1" -ne 0 ] && [ "$enospc" -gt 0 ] && [ -z "$broken" ] && [ "$rc" -eq 0 ] && [ "$diff" = 0 ]; then
    record "disk full" ok "$diff" "the save failed with ENOSPC (exit $rc1); resumed at step $(grep -o 'from the checkpoint at step [0-9]*' "$W/full.rerun.log" | grep -o '[0-9]*$')"
  else
    record "disk full" FAIL "$diff" "first exit $rc1, ENOSPC lines $enospc, broken '$broken', rerun exit $rc"
  fi
  umount "$df_dir"
else
  echo "disk full  skip (mounting a tmpfs is not allowed here)"
fi

# The newest checkpoint truncated after the fact: resume falls back to the one before it.
tf="$W/trunc"; run="$tf/soak"
job "$tf" >"$W/trunc.yaml"
"$LOOM" train "$W/trunc.yaml" --no-supervise --stop-after 11 >"$W/trunc.first.log" 2>&1
newest=$(ls -d "$run"/state/*/ | sort | tail -1)
truncate -s 100 "$newest/state.safetensors"
"$LOOM" train "$W/trunc.yaml" >"$W/trunc.rerun.log" 2>&1
rc=$?
diff=$(compare "$run/soak.safetensors")
if [ "$rc" -eq 0 ] && [ "$diff" = 0 ] && grep -q "cannot be loaded" "$W/trunc.rerun.log"; then
  record "truncated" ok "$diff" "$(basename "$newest") truncated; $(grep -o 'resuming .* at step [0-9]*' "$W/trunc.rerun.log" | sed 's#.* at step #resumed at step #')"
else
  record "truncated" FAIL "$diff" "rerun exit $rc"
fi

took=$(( $(date +%s) - start ))
echo
echo "trials: $N kill trials + disk full + truncated; passed $pass, failed $fail"
printf 'kills by phase/victim:'
for k in $(printf '%s\n' "${!kills[@]}" | sort); do printf ' %s %s' "$k" "${kills[$k]}"; done
echo
echo "largest difference from the reference LoRA: $max_diff"
echo "time: ${took} s (reference run ${ref_ms} ms); work folder $W"
if [ "$fail" -eq 0 ] && [ -z "${SOAK_DIR:-}" ]; then rm -rf "$W"; fi
[ "$fail" -eq 0 ]
