#!/usr/bin/env bash
# A `loom train` killed with SIGKILL at a random step and then rerun resumes from its newest
# checkpoint and ends with LoRA weights within 1e-5 of an uninterrupted run with the same seed.
#   test_train_kill.sh LOOM MAKE_TINY_FIXTURE PYTHON
set -u
LOOM="$1"; FIXTURE="$2"; PY="$3"
source "$(dirname "$0")/lib.sh"
make_fixture "$FIXTURE"

job() {  # job NAME
  cat <<YAML
job: extension
config:
  name: $1
  process:
    - type: sd_trainer
      training_folder: $TMP/runs
      device: cpu
      training_seed: 11
      network: {linear: 4, linear_alpha: 4}
      save: {save_every: 2, dtype: float32, max_step_saves_to_keep: 3}
      datasets:
        - folder_path: $TMP/fixture/data
          resolution: [64]
      train: {steps: 14, lr: 3e-3, batch_size: 2, gradient_checkpointing: true,
              disable_sampling: true}
      model: {name_or_path: $TMP/fixture/model, arch: sd1}
YAML
}
job whole >"$TMP/whole.yaml"
job split >"$TMP/split.yaml"
"$LOOM" train "$TMP/whole.yaml" >"$TMP/whole.log" 2>&1 || { echo "FAIL uninterrupted run"; tail "$TMP/whole.log"; exit 1; }

kill_at=$(( 3 + RANDOM % 9 ))  # a step in 3..11
# --no-supervise: the SIGKILL must hit the trainer itself (under the supervisor it would hit the
# parent, whose child then stops cleanly with a checkpoint instead of dying mid-step).
"$LOOM" train "$TMP/split.yaml" --no-supervise >"$TMP/split1.log" 2>&1 &
pid=$!
metrics="$TMP/runs/split/metrics.jsonl"
wait_steps split "$kill_at" "$pid"
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
killed_after=$(cat "$metrics" | wc -l)
if [ -f "$TMP/runs/split/split.safetensors" ]; then
  echo "FAIL the first run finished before it was killed (killed after $killed_after steps)"; exit 1
fi
"$LOOM" train "$TMP/split.yaml" >"$TMP/split2.log" 2>&1 || { echo "FAIL resumed run"; tail "$TMP/split2.log"; exit 1; }
grep -q "resuming" "$TMP/split2.log" || { echo "FAIL the rerun did not resume"; tail "$TMP/split2.log"; exit 1; }

echo "killed with SIGKILL after $killed_after steps; resumed; the final LoRA against an uninterrupted run:"
if "$PY" "$LORA_DIFFERENCE" "$TMP/runs/whole/whole.safetensors" "$TMP/runs/split/split.safetensors"
then echo "1 passed, 0 failed"
else echo "0 passed, 1 failed"; exit 1; fi
