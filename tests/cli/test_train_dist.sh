#!/usr/bin/env bash
# Data-parallel training on `sim` with 2 and 3 processes (Gloo over the loopback), against one
# process training the same global batch:
#   - `loom train --nproc N` at batch b ends with the LoRA of one process at batch N·b (≤ 1e-5);
#     rank 0 alone writes the run folder;
#   - an OOM injected on rank 1 only (LOOM_FAULTS rank=1) makes every rank take the same rung
#     and retry the same step: zero steps lost, and the LoRA of one process given the same OOM;
#   - 3 ranks, the OOM on rank 2;
#   - rank 1 killed with SIGKILL mid-run: the supervisor ends the group, restarts it and it
#     resumes from the last checkpoint to the LoRA of an uninterrupted run (bounded by timeout);
#   - a resume with another number of ranks keeps the checkpoint's global batch when they can
#     share it (1 process, batch 4 from 2 x 2), and stops with exit 2 naming both when they
#     cannot (3 ranks);
#   - torchrun --no-python launches the same ranks (when the venv has torchrun).
#   test_train_dist.sh LOOM MAKE_TINY_FIXTURE PYTHON
set -u
LOOM="$1"; FIXTURE="$2"; PY="$3"
source "$(dirname "$0")/lib.sh"
make_fixture "$FIXTURE"
export LOOM_DIST_TIMEOUT=60  # a rank that never answers fails the test in a minute, not ten

job() {  # job NAME BATCH [STEPS]: lib.sh's tiny job at batch BATCH, not reusing stored plans
  tiny_job "$1" "${3:-8}" | sed -e "s/batch_size: 2,/batch_size: $2,/" \
    -e "s/probe: false}/probe: false, reuse_stable: off}/"
}

# same_lora A B WHAT: the two runs' final LoRAs agree within 1e-5.
same_lora() {
  local out
  if out=$("$PY" "$LORA_DIFFERENCE" "$TMP/runs/$1/$1.safetensors" "$TMP/runs/$2/$2.safetensors" 2>&1
  ); then ok "$3 ($out)"; else bad "$3 ($out)"; fi
}

# train NAME LOG ARGS...: loom train $TMP/NAME.yaml ARGS, bounded by 5 minutes.
train() {
  local name="$1" log="$2"; shift 2
  timeout 300 "$LOOM" train "$TMP/$name.yaml" "$@" >"$TMP/$log.log" 2>&1
}

steps_of() { cat "$TMP/runs/$1/metrics.jsonl" 2>/dev/null | wc -l; }

# faulted_pair ONE MANY NPROC BATCH STEPS FAULT RANK: one process at batch NPROC x BATCH given
# FAULT, and NPROC ranks at BATCH given FAULT on rank RANK only (logs $TMP/ONE.log, $TMP/MANY.log).
faulted_pair() {
  local one="$1" many="$2" n="$3" b="$4" steps="$5" fault="$6" r="$7"
  job "$one" $((n * b)) "$steps" >"$TMP/$one.yaml"
  job "$many" "$b" "$steps" >"$TMP/$many.yaml"
  train "$one" "$one" --faults "$fault" || bad "one process given $fault exits $?"
  if train "$many" "$many" --nproc "$n" --faults "$fault:rank=$r"; then
    ok "$n ranks recover from $fault on rank $r"
  else
    bad "$n ranks given $fault on rank $r exit $?"; tail -20 "$TMP/$many.log"
  fi
}

# ---- 2 ranks at batch 2 = 1 process at batch 4 ------------------------------------------------
job one4 4 >"$TMP/one4.yaml"
job two2 2 >"$TMP/two2.yaml"
train one4 one4 || { bad "one process at batch 4"; tail "$TMP/one4.log"; }
if train two2 two2 --nproc 2; then
  ok "--nproc 2 trains"
else
  bad "--nproc 2 exits $?"; tail -20 "$TMP/two2.log"
fi
same_lora one4 two2 "2 ranks at batch 2 train what one process at batch 4 trains"
grep -q "^\[rank1\]: .*rank 1 of 2" "$TMP/two2.log" && ok "rank 1 says which rank it is" ||
  bad "no rank 1 line"
[ "$(steps_of two2)" -eq 8 ] && ok "metrics.jsonl has each step once (rank 0's)" ||
  bad "metrics.jsonl has $(steps_of two2) lines, not 8"
[ "$(grep -c '"event":"save"' "$TMP/runs/two2/events.jsonl")" -eq 5 ] &&
  ok "events.jsonl has each save once (4 checkpoints and the final LoRA)" ||
  bad "events.jsonl saves: $(grep -c '"event":"save"' "$TMP/runs/two2/events.jsonl")"
grep -q "^  ranks: 2" "$TMP/runs/two2/stable.yaml" && ok "stable.yaml says 2 ranks" ||
  bad "stable.yaml does not carry the ranks"
"$PY" - "$TMP/runs/two2/state/000000008" <<'PY' && ok "the checkpoint keeps both ranks' RNG and the world size" || bad "checkpoint content"
import json, sys
from safetensors import safe_open
d = sys.argv[1]
meta = json.load(open(d + "/trainer.json"))
assert meta["world_size"] == 2 and meta["global_batch"] == 4, meta
with safe_open(d + "/state.safetensors", "pt") as f:
    assert "rng_cpu" in f.keys() and "rng_cpu_rank1" in f.keys()
PY

# ---- an OOM on rank 1 only ---------------------------------------------------------------------
faulted_pair one4f two2f 2 2 8 "oom:phase=train_step:step=3" 1
r0=$(grep "^\[rank0\]: .*plan change:" "$TMP/two2f.log" | sed 's/^\[rank0\]: //')
r1=$(grep "^\[rank1\]: .*plan change:" "$TMP/two2f.log" | sed 's/^\[rank1\]: //')
if [ -n "$r0" ] && [ "$r0" = "$r1" ]; then ok "both ranks took the same rung: ${r0#*plan change: }"
else bad "the ranks' rungs differ: rank 0 '$r0', rank 1 '$r1'"; fi
grep -q "^\[rank0\]: .*another rank ran out of memory" "$TMP/two2f.log" &&
  ok "rank 0 dropped its attempt for rank 1's OOM" || bad "rank 0 did not follow rank 1"
[ "$(grep -c '"event":"oom"' "$TMP/runs/two2f/events.jsonl")" -eq 1 ] &&
  ok "one OOM event, written by rank 0" || bad "OOM events: $(grep -c '"event":"oom"' "$TMP/runs/two2f/events.jsonl")"
[ "$("$PY" -c "import json,sys; print(' '.join(str(json.loads(l)['step']) for l in open(sys.argv[1])))" "$TMP/runs/two2f/metrics.jsonl")" = "1 2 3 4 5 6 7 8" ] &&
  ok "zero steps lost: steps 1..8 each once" || bad "steps: $(cat "$TMP/runs/two2f/metrics.jsonl" | wc -l)"
same_lora one4f two2f "with the OOM on rank 1, the LoRA of one process given the same OOM"

# ---- an OOM in rank 1's optimizer update, after rank 0's update went through ------------------
# Rank 0 must put its update back (from its host copy) before the ranks retry the step.
faulted_pair one4u two2u 2 2 8 "oom:phase=train_step:step=4:during=update" 1
same_lora one4u two2u "rank 0 undid its update: the LoRA of one process given the same OOM"

# ---- 3 ranks, the OOM on rank 2 ----------------------------------------------------------------
faulted_pair one3f three1f 3 1 6 "oom:phase=train_step:step=2" 2
[ "$(grep -c "plan change:" "$TMP/three1f.log")" -eq 3 ] && ok "each of the 3 ranks took the rung once" ||
  bad "plan change lines: $(grep -c "plan change:" "$TMP/three1f.log")"
same_lora one3f three1f "3 ranks at batch 1 train what one process at batch 3 trains"

# ---- SIGKILL of rank 1 mid-run: the group restarts and resumes --------------------------------
job killed 2 >"$TMP/killed.yaml"
timeout 300 "$LOOM" train "$TMP/killed.yaml" --nproc 2 >"$TMP/killed.log" 2>&1 &
sup=$!
wait_steps killed 3 "$sup" || bad "the 2-rank run did not reach step 3"
victim=""
for child in $(pgrep -P "$(pgrep -P "$sup")"); do  # timeout → the supervisor → the ranks
  tr '\0' '\n' <"/proc/$child/environ" 2>/dev/null | grep -qx "RANK=1" && victim=$child
done
if [ -n "$victim" ]; then kill -9 "$victim"; ok "killed rank 1 (pid $victim) after step $(steps_of killed)"
else bad "no rank 1 process to kill"; fi
if wait "$sup"; then ok "the supervisor restarted the group and the run finished"
else bad "the killed run exits $? (124: it hung)"; tail -20 "$TMP/killed.log"; fi
grep -q '"event":"restart"' "$TMP/runs/killed/events.jsonl" && ok "events.jsonl records the restart" ||
  bad "no restart event"
grep -q "resuming" "$TMP/killed.log" && ok "the restarted ranks resumed from a checkpoint" ||
  bad "no resume"
same_lora two2 killed "killed and resumed, the LoRA of the uninterrupted 2-rank run"

# ---- another number of ranks on resume ---------------------------------------------------------
job regroup 2 >"$TMP/regroup.yaml"
train regroup regroup1 --nproc 2 --stop-after 3 || bad "the 2-rank run stopped after 3 steps"
cp -r "$TMP/runs/regroup" "$TMP/regroup.saved"
if train regroup regroup3 --nproc 3; then
  bad "3 ranks resumed a global batch of 4"
else
  code=$?
  grep -q "global batch of 4 items; 3 ranks cannot share it evenly" "$TMP/regroup3.log" &&
    [ "$code" -eq 2 ] && ok "3 ranks on a batch-4 checkpoint: exit 2 naming both" ||
    { bad "3 ranks: exit $code"; tail -5 "$TMP/regroup3.log"; }
fi
if train regroup regroup_one; then
  grep -q "saved by 2 rank(s); 1 rank(s) go on with its global batch of 4" "$TMP/regroup_one.log" &&
    ok "one process resumes the 2-rank checkpoint at its global batch" || bad "no note of the rule"
  same_lora one4 regroup "resumed by one process, the LoRA of one process at batch 4"
else
  bad "one process could not resume the 2-rank checkpoint"; tail -5 "$TMP/regroup_one.log"
fi

# ---- launching mistakes: exit 2, saying what is wrong ------------------------------------------
usage_error() {  # usage_error WHAT TEXT ENV... -- ARGS...
  local what="$1" text="$2"; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local code=0
  env "${envs[@]}" timeout 60 "$LOOM" train "$TMP/two2.yaml" "$@" >"$TMP/usage.log" 2>&1 || code=$?
  if [ "$code" -eq 2 ] && grep -q -- "$text" "$TMP/usage.log"; then ok "$what: exit 2"
  else bad "$what: exit $code, $(tail -1 "$TMP/usage.log")"; fi
}
usage_error "--nproc 0" "give 1 to 64 processes" -- --nproc 0
usage_error "--nproc with --no-supervise" "cannot be combined with --no-supervise" -- --nproc 2 --no-supervise
usage_error "--nproc inside torchrun" "drop --nproc" RANK=0 WORLD_SIZE=2 -- --nproc 2
usage_error "a fault rule's rank that is not one" "rank= must be a whole number" \
  -- --faults "oom:phase=load:rank=x"
usage_error "LOOM_DIST_TIMEOUT that is not seconds" "LOOM_DIST_TIMEOUT is 'soon'" \
  RANK=0 WORLD_SIZE=1 MASTER_PORT=$((20000 + RANDOM % 20000)) LOOM_DIST_TIMEOUT=soon --

# ---- torchrun ----------------------------------------------------------------------------------
TORCHRUN="$(dirname "$PY")/torchrun"
if [ -x "$TORCHRUN" ]; then
  job torch2 2 >"$TMP/torch2.yaml"
  if timeout 300 "$TORCHRUN" --no-python --nproc-per-node 2 --master-port $((20000 + RANDOM % 20000)) \
      "$LOOM" train "$TMP/torch2.yaml" >"$TMP/torch2.log" 2>&1; then
    same_lora two2 torch2 "torchrun --no-python --nproc-per-node 2 trains what --nproc 2 trains"
  else
    bad "torchrun exits $?"; tail -20 "$TMP/torch2.log"
  fi
else
  echo "skip torchrun: $TORCHRUN not found"
fi
finish
