#!/usr/bin/env bash
# The supervisor through the `loom` executable (src/cli/supervisor.h): a child killed with
# SIGKILL is restarted and the run ends as an uninterrupted one; a child that dies every time
# stops after oom.max_restarts restarts with exit 1, the host rung in plan.yaml and a clear
# message; SIGTERM to the parent stops the child cleanly with a checkpoint and exit 130; a config
# error still exits 2; SIGKILL of the parent leaves no orphan training.
#   test_supervisor.sh LOOM MAKE_TINY_FIXTURE PYTHON
set -u
LOOM="$1"; FIXTURE="$2"; PY="$3"
source "$(dirname "$0")/lib.sh"
make_fixture "$FIXTURE"

job() {  # job NAME STEPS [MAX_RESTARTS]
  cat <<YAML
job: extension
config:
  name: $1
  process:
    - type: sd_trainer
      training_folder: $TMP/runs
      device: sim
      training_seed: 5
      network: {linear: 4, linear_alpha: 4}
      save: {save_every: 2, dtype: float32, max_step_saves_to_keep: 3}
      datasets:
        - folder_path: $TMP/fixture/data
          resolution: [64]
      train: {steps: $2, lr: 3e-3, batch_size: 2, gradient_checkpointing: true,
              disable_sampling: true}
      model: {name_or_path: $TMP/fixture/model, arch: sd1}
      oom: {vram_limit: 1GiB, probe: false, max_restarts: ${3:-3}}
YAML
}

last_step() { tail -n 1 "$TMP/runs/$1/metrics.jsonl" 2>/dev/null | sed 's/.*"step":\([0-9]*\).*/\1/'; }
count() { grep -c "\"event\":\"$2\"" "$TMP/runs/$1/events.jsonl" 2>/dev/null; }

# 1: SIGKILL of the child mid-run → restarted, resumes, ends equal to an uninterrupted run.
job whole 8 >"$TMP/whole.yaml"
job restarted 8 >"$TMP/restarted.yaml"
"$LOOM" train "$TMP/whole.yaml" --no-supervise >"$TMP/whole.log" 2>&1 \
  || { bad "uninterrupted run"; tail "$TMP/whole.log"; }
"$LOOM" train "$TMP/restarted.yaml" >"$TMP/restarted.log" 2>&1 &
parent=$!
wait_steps restarted 3 "$parent"
child=$(pgrep -P "$parent")
[ -n "$child" ] && [ "$(echo "$child" | wc -l)" -eq 1 ] && ok "one training child ($child)" \
  || bad "children of the parent: '$child'"
kill -9 $child 2>/dev/null
wait "$parent"
rc=$?
[ "$rc" -eq 0 ] && ok "the supervised run finishes after the kill" \
  || { bad "supervised run exit code $rc"; tail -20 "$TMP/restarted.log"; }
[ "$(count restarted restart)" = 1 ] && ok "events.jsonl has one restart record" \
  || bad "restart records: $(count restarted restart)"
grep '"event":"restart"' "$TMP/runs/restarted/events.jsonl" | grep -q '"cause":"signal 9 (SIGKILL)"' \
  && ok "the restart names SIGKILL" || bad "the restart record does not name SIGKILL"
grep -q "restart 1 of 3" "$TMP/restarted.log" && grep -q "resuming" "$TMP/restarted.log" \
  && ok "the parent says it restarts and the child resumes" \
  || { bad "no restart/resume lines"; tail -20 "$TMP/restarted.log"; }
[ "$(last_step restarted)" = 8 ] && [ -f "$TMP/runs/restarted/restarted.safetensors" ] \
  && ok "the run reached step 8 with a final LoRA" || bad "last step $(last_step restarted)"
"$PY" "$LORA_DIFFERENCE" "$TMP/runs/whole/whole.safetensors" "$TMP/runs/restarted/restarted.safetensors" \
  && ok "final LoRA equals the uninterrupted run" || bad "final LoRA differs"

# 2: the child dies at load every time → 2 restarts, then exit 1 with the give-up message.
job doomed 4 2 >"$TMP/doomed.yaml"
LOOM_FAULTS="kill:phase=load" "$LOOM" train "$TMP/doomed.yaml" >"$TMP/doomed.out" 2>"$TMP/doomed.err"
rc=$?
[ "$rc" -eq 1 ] && ok "gives up with exit 1" || bad "give-up exit code $rc"
grep -q "error: the training process died 3 times, each time by signal 9 (SIGKILL); it was restarted 2 times (oom.max_restarts: 2), so loom stops here" \
  "$TMP/doomed.err" && ok "the give-up message names the cause and the count" \
  || { bad "give-up message"; cat "$TMP/doomed.err"; }
grep -q "run folder:      $TMP/runs/doomed" "$TMP/doomed.err" \
  && grep -q "last checkpoint: none" "$TMP/doomed.err" && grep -q "try: .*loom train" "$TMP/doomed.err" \
  && ok "the message names the run folder, the checkpoint and what to try" \
  || { bad "give-up details"; cat "$TMP/doomed.err"; }
[ "$(count doomed restart)" = 2 ] && [ "$(count doomed supervisor_gave_up)" = 1 ] \
  && ok "events.jsonl: 2 restarts and the give-up" \
  || bad "events: $(count doomed restart) restarts, $(count doomed supervisor_gave_up) give-ups"
grep '"event":"restart"' "$TMP/runs/doomed/events.jsonl" | head -1 \
  | grep -q '"rule":"host.caches_to_disk"' && ok "the first restart took the host rung" \
  || bad "first restart rule"
grep -q "memory_caches: false" "$TMP/runs/doomed/plan.yaml" && ok "plan.yaml: memory_caches false" \
  || { bad "plan.yaml"; cat "$TMP/runs/doomed/plan.yaml"; }
grep -q 'class="status-failed"' "$TMP/runs/doomed/report.html" 2>/dev/null \
  && grep -q 'id="error">the training process died 3 times' "$TMP/runs/doomed/report.html" \
  && grep -q "restarts after a crash" "$TMP/runs/doomed/report.html" \
  && ok "report.html says the run failed, how, and the restarts" || bad "report.html after the give-up"

# 3: SIGTERM to the parent → the child checkpoints after its step, exit 130, no restart; a rerun
# resumes and finishes.
job stopped 10 >"$TMP/stopped.yaml"
"$LOOM" train "$TMP/stopped.yaml" >"$TMP/stopped1.log" 2>&1 &
parent=$!
wait_steps stopped 3 "$parent"
kill -TERM "$parent"
wait "$parent"
rc=$?
[ "$rc" -eq 130 ] && ok "SIGTERM exits 130" || { bad "SIGTERM exit code $rc"; tail "$TMP/stopped1.log"; }
at=$(last_step stopped)
[ -f "$TMP/runs/stopped/state/$(printf %09d "$at")/COMPLETE" ] \
  && ok "a checkpoint at the step it stopped ($at)" || bad "no checkpoint at step $at"
grep -q "stopped at step $at; rerun to resume" "$TMP/stopped1.log" && ok "it says where it stopped" \
  || bad "no 'stopped at step $at' line"
[ "$(count stopped restart)" = 0 ] && [ "$(count stopped interrupted)" = 1 ] \
  && ok "no restart after SIGTERM" || bad "restarts after SIGTERM: $(count stopped restart)"
"$LOOM" train "$TMP/stopped.yaml" >"$TMP/stopped2.log" 2>&1
rc=$?
[ "$rc" -eq 0 ] && grep -q "resuming .* from the checkpoint at step $at" "$TMP/stopped2.log" \
  && [ "$(last_step stopped)" = 10 ] && ok "the rerun resumes at step $at and finishes" \
  || { bad "rerun exit code $rc"; tail "$TMP/stopped2.log"; }

# 4: a config error exits 2 through the parent.
job bad 4 >"$TMP/bad.yaml"
"$LOOM" train "$TMP/bad.yaml" --set config.process.0.train.batch_size=0 >"$TMP/bad.out" 2>"$TMP/bad.err"
rc=$?
[ "$rc" -eq 2 ] && grep -q "error: .*batch_size must be >= 1" "$TMP/bad.err" \
  && ok "a config error exits 2" || { bad "config error exit code $rc"; cat "$TMP/bad.err"; }

# 5: SIGKILL of the parent → the child is asked to stop (checkpoint, exit), not left training.
job orphan 200 >"$TMP/orphan.yaml"
"$LOOM" train "$TMP/orphan.yaml" >"$TMP/orphan.log" 2>&1 &
parent=$!
wait_steps orphan 2 "$parent"
child=$(pgrep -P "$parent")
kill -9 "$parent"
wait "$parent" 2>/dev/null
for _ in $(seq 600); do kill -0 $child 2>/dev/null || break; sleep 0.05; done
if kill -0 $child 2>/dev/null; then
  bad "the child kept running after the parent was killed"; kill -9 $child
else
  [ "$(count orphan interrupted)" = 1 ] && [ "$(last_step orphan)" -lt 200 ] \
    && ok "the child of a killed parent stopped with a checkpoint" \
    || bad "orphan: $(count orphan interrupted) interrupted records, last step $(last_step orphan)"
fi

finish
