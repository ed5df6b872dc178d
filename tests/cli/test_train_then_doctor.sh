#!/usr/bin/env bash
# `loom train` on the tiny model with injected faults, then `loom doctor` on what it wrote: the
# console (stdout and stderr), the run folder's loom.log and events.jsonl. The doctor must name
# the phases that ran out of memory, the rules loom took (the same ones events.jsonl records),
# and a verdict that fits the run: recovered, sampling only, does not fit, oom.enabled false,
# worker state. The guard writes these lines and the doctor reads them through one wording
# module (loom/guard/log_wording.h); this is the test that they still meet.
#   test_train_then_doctor.sh LOOM MAKE_TINY_FIXTURE
set -u
LOOM="$1"; FIXTURE="$2"
source "$(dirname "$0")/lib.sh"
make_fixture "$FIXTURE"

job() {  # job NAME CHECKPOINTING [OOM_ENABLED]
  cat <<YAML
job: extension
config:
  name: $1
  process:
    - type: sd_trainer
      training_folder: $TMP/runs
      device: sim
      training_seed: 3
      network: {linear: 4, linear_alpha: 4}
      save: {save_every: 100, dtype: float32}
      datasets:
        - folder_path: $TMP/fixture/data
          resolution: [64]
      train: {steps: 4, lr: 1e-3, batch_size: 2, gradient_checkpointing: $2,
              skip_first_sample: true}
      sample:
        sampler: ddim
        width: 64
        height: 64
        sample_steps: 2
        sample_every: 2
        prompts: ['a square', 'a blue circle']
      model: {name_or_path: $TMP/fixture/model, arch: sd1}
      oom: {vram_limit: 1GiB, probe: false, enabled: ${3:-true}}
YAML
}

# train NAME RC [ARGS...]: runs `loom train` on $TMP/NAME.yaml (LOOM_FAULTS from the caller),
# console in $TMP/NAME.console; checks the exit code.
train() {
  local name="$1" want="$2"; shift 2
  "$LOOM" train "$TMP/$name.yaml" "$@" >"$TMP/$name.console" 2>&1
  local rc=$?
  [ "$rc" -eq "$want" ] && ok "$name: loom train exits $want" \
    || { bad "$name: loom train exit code $rc (want $want)"; cat "$TMP/$name.console"; }
}

# doctor NAME FILE [--json]: `loom doctor FILE` into $TMP/NAME.doctor; it must find a case (0).
doctor() {
  local name="$1" file="$2"; shift 2
  "$LOOM" doctor "$file" "$@" >"$TMP/$name.doctor" 2>&1
  local rc=$?
  [ "$rc" -eq 0 ] && ok "$name: doctor exits 0" \
    || { bad "$name: doctor exit code $rc"; cat "$TMP/$name.doctor"; }
}

# says NAME TEXT: the doctor's output NAME has TEXT (a fixed string).
says() {
  grep -qF -- "$2" "$TMP/$1.doctor" && ok "$1: says '$2'" \
    || { bad "$1: does not say '$2'"; cat "$TMP/$1.doctor"; }
}
never_says() {
  grep -qF -- "$2" "$TMP/$1.doctor" && { bad "$1: says '$2'"; cat "$TMP/$1.doctor"; } \
    || ok "$1: does not say '$2'"
}

# The rules of events.jsonl's change events, and those the doctor lists, in order.
event_rules() { grep '"event":"change"' "$1" | sed 's/.*"rule":"\([^"]*\)".*/\1/'; }
doctor_rules() { sed -n 's/.*(rule: \([^)]*\)), after the OOM.*/\1/p' "$TMP/$1.doctor"; }
same_rules() {  # same_rules NAME EVENTS
  local want got
  want="$(event_rules "$2" | tr '\n' ' ')"; got="$(doctor_rules "$1" | tr '\n' ' ')"
  [ -n "$want" ] && [ "$want" = "$got" ] && ok "$1: lists loom's rules in order ($want)" \
    || bad "$1: lists rules '$got', events.jsonl has '$want'"
}

# 1. Recovered: a training step at step 1 (checkpointing off) and the preview at step 2 run out
#    of memory; loom turns on checkpointing, then previews one prompt at a time, and finishes.
job recover false >"$TMP/recover.yaml"
LOOM_FAULTS="oom:phase=train_step:step=1;oom:phase=sample:times=1" train recover 0
run="$TMP/runs/recover"
change_line=$(grep -n "plan change: train.gradient_checkpointing" "$TMP/recover.console" | cut -d: -f1)
doctor recover_console "$TMP/recover.console"
doctor recover_log "$run/loom.log"
doctor recover_events "$run/events.jsonl"
for d in recover_console recover_log recover_events; do
  says $d "(loom log, "
  says $d "case:  early_steps - OOM in the first training steps (step 1)"
  says $d "first OOM (training step, step 1)"
  says $d "another OOM (sampling at step 2)"
  says $d "(rule: train.gradient_checkpointing), after the OOM in train_step at step 1"
  says $d "(rule: sample.one_prompt_at_a_time), after the OOM in sample at step 2"
  same_rules $d "$run/events.jsonl"
done
says recover_console "set \`train.gradient_checkpointing: true\` (loom already made this change, line $change_line)"
says recover_console "loom recovered: 2 out-of-memory errors recovered, 2 plan changes, 0 steps lost"
says recover_log "loom recovered: 2 out-of-memory errors recovered, 2 plan changes, 0 steps lost"
never_says recover_console "loom outcome:"
doctor recover_json "$TMP/recover.console" --json
says recover_json '"case": "early_steps"'
says recover_json '"oom_step": 1'
says recover_json '"oom_count": 2'
says recover_json '"rule": "sample.one_prompt_at_a_time"'
says recover_json '"loom_recovered": "2 out-of-memory errors recovered, 2 plan changes, 0 steps lost"'

# 2. Sampling only: the steps fit (checkpointing on), the preview at step 2 does not.
job sampling true >"$TMP/sampling.yaml"
LOOM_FAULTS="oom:phase=sample:times=1" train sampling 0
doctor sampling_console "$TMP/sampling.console"
doctor sampling_log "$TMP/runs/sampling/loom.log"
for d in sampling_console sampling_log; do
  says $d "case:  sampling_only - OOM while generating samples; the training steps were fine"
  says $d "first OOM (sampling at step 2)"
  says $d "(rule: sample.one_prompt_at_a_time), after the OOM in sample at step 2"
  same_rules $d "$TMP/runs/sampling/events.jsonl"
done
says sampling_console "loom recovered: 1 out-of-memory errors recovered, 1 plan changes, 0 steps lost"

# 3. Does not fit: a budget below the weights; every low_vram level fails at load → exit 4.
job small false >"$TMP/small.yaml"
train small 4 --vram 64KiB
doctor small_console "$TMP/small.console"
doctor small_log "$TMP/runs/small/loom.log"
for d in small_console small_log; do
  says $d "case:  before_step_1 - OOM before training step 1, during the model load"
  says $d "first OOM (model load)"
  says $d "(rule: load.low_vram), after the OOM in load"
  same_rules $d "$TMP/runs/small/events.jsonl"
done
says small_console "loom outcome: does not fit: every rung of the ladder was tried for load"
never_says small_console "loom recovered:"

# 4. oom.enabled false: the first OOM (step 2) ends the run; its WARN line and the error line
#    that repeats it are one OOM.
job off false false >"$TMP/off.yaml"
LOOM_FAULTS="oom:phase=train_step:step=2" train off 4
doctor off_console "$TMP/off.console"
says off_console "case:  early_steps - OOM in the first training steps (step 2)"
says off_console "training ran out of memory at step 2 after 1 successful step"
says off_console "first OOM (training step, step 2)"
says off_console "loom outcome: does not fit: out of memory in train_step at step 2 (sim out of memory"
never_says off_console "OOM again"
never_says off_console "loom already changed"

# 5. Worker state: a dirty device → exit 5 before anything is allocated.
job dirty false >"$TMP/dirty.yaml"
LOOM_FAULTS=dirty train dirty 5
doctor dirty_console "$TMP/dirty.console"
doctor dirty_events "$TMP/runs/dirty/events.jsonl"
for d in dirty_console dirty_events; do
  says $d "case:  worker_state - GPU / worker state problem, not (only) the config"
  says $d "start it on a fresh worker"
done
says dirty_console "loom outcome: worker state: sim (simulated accelerator, budget 1.00 GiB) shows 0 bytes free of 1.00 GiB"
says dirty_console "free                    0 bytes of 1.00 GiB"

finish
