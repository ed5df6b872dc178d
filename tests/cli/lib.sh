# Shared by the end-to-end scripts that train: a scratch folder removed at exit, the tiny model
# and dataset fixture, pass/fail counters, and a wait for a run's progress.
#   source "$(dirname "$0")/lib.sh"; make_fixture MAKE_TINY_FIXTURE
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
# Each script has its own stable-config store: runs of one test never start from plans another
# test (or the user) recorded.
export LOOM_HOME="$TMP/home"
pass=0; fail=0
# lora_difference.py A B [--max TOL]: two LoRA files' largest difference, passing at most TOL.
LORA_DIFFERENCE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lora_difference.py"
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
# finish: prints the counts; the script's exit status is 0 only when nothing failed.
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; }

# make_fixture MAKE_TINY_FIXTURE: the tiny SD model and dataset in $TMP/fixture/{model,data}.
make_fixture() { "$1" "$TMP/fixture" >/dev/null || { echo "FAIL fixture"; exit 1; }; }

# wait_steps NAME N PID: until run NAME (in $TMP/runs) has written N metrics lines; fails when
# PID is gone first, or after ten minutes (a hang).
wait_steps() {
  local metrics="$TMP/runs/$1/metrics.jsonl"
  for _ in $(seq 12000); do
    [ "$(cat "$metrics" 2>/dev/null | wc -l)" -ge "$2" ] && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# tiny_job NAME STEPS [SAVE_EVERY]: a job on the fixture on `sim` (1 GiB, no probe, no sampling),
# batch 2 at 64 px, a checkpoint every SAVE_EVERY steps (default 2), run folder $TMP/runs/NAME.
tiny_job() {
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
      save: {save_every: ${3:-2}, dtype: float32}
      datasets:
        - folder_path: $TMP/fixture/data
          resolution: [64]
      train: {steps: $2, lr: 1e-3, batch_size: 2, gradient_checkpointing: false,
              disable_sampling: true}
      model: {name_or_path: $TMP/fixture/model, arch: sd1}
      oom: {vram_limit: 1GiB, probe: false}
YAML
}

# kill_and_resume LOOM PY KILL_FROM KILL_SPAN: runs $TMP/split.yaml (run "split" in $TMP/runs),
# kills it with SIGKILL after a step in KILL_FROM..KILL_FROM+KILL_SPAN-1, reruns it to the end and
# checks that the rerun resumes and that its LoRA equals run "whole"'s (within 1e-5). The job
# must have more than KILL_FROM+KILL_SPAN-1 steps.
kill_and_resume() {
  local loom="$1" py="$2" kill_at=$(( $3 + RANDOM % $4 ))
  # The kill comes from here at a moment the polling picks (mid-step, mid-save); a step takes
  # milliseconds, so the run can outpace the polling: the fault kills it where the next step
  # begins, after the span's last step, should it get that far.
  LOOM_FAULTS="kill:phase=train_step:step=$(( $3 + $4 ))" \
    "$loom" train "$TMP/split.yaml" --no-supervise >"$TMP/split1.log" 2>&1 &
  local pid=$!
  wait_steps split "$kill_at" "$pid"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  local killed_after
  killed_after=$(wc -l <"$TMP/runs/split/metrics.jsonl")
  if [ -f "$TMP/runs/split/split.safetensors" ]; then bad "killed before the end (it finished)"; fi
  if "$loom" train "$TMP/split.yaml" >"$TMP/split2.log" 2>&1 && grep -q "resuming" "$TMP/split2.log"
  then ok "the rerun resumes (killed after $killed_after steps)"
  else bad "the rerun resumes"; tail "$TMP/split2.log"; fi
  if "$py" "$LORA_DIFFERENCE" "$TMP/runs/whole/whole.safetensors" "$TMP/runs/split/split.safetensors"
  then ok "the resumed LoRA equals the uninterrupted one"
  else bad "the resumed LoRA equals the uninterrupted one"; fi
}
