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

# fixture_at_128px PY: the fixture's images at 128 px with their captions in $TMP/data, so that a
# 64 and a 128 bucket exist.
fixture_at_128px() {
  "$1" - "$TMP/fixture/data" "$TMP/data" <<'PY' || { echo "FAIL dataset"; exit 1; }
import os, shutil, sys
from PIL import Image
src, data = sys.argv[1:3]
os.makedirs(data)
for name in sorted(os.listdir(src)):
    stem, ext = os.path.splitext(name)
    if ext.lower() in (".png", ".jpg", ".jpeg", ".webp"):
        Image.open(os.path.join(src, name)).convert("RGB").resize((128, 128)).save(
            os.path.join(data, stem + ".png"))
    elif ext == ".txt":
        shutil.copy(os.path.join(src, name), os.path.join(data, name))
PY
}

# tight_run LOOM PY NAME BUDGET RESOLUTIONS RULES...: the job `job NAME BUDGET 2 false RESOLUTIONS
# 4 256` (the caller's job function: batch ${TIGHT_BATCH:-2}, no checkpointing, 256 px previews) ends with each of
# RULES among its ladder changes, every OOM a real one (none injected) and each of its 8 steps
# trained once, 0 steps lost.
tight_run() {
  local loom="$1" py="$2" name="$3" budget="$4" res="$5"; shift 5
  job "$name" "$budget" "${TIGHT_BATCH:-2}" false "$res" 4 256 >"$TMP/$name.yaml"
  if "$loom" train "$TMP/$name.yaml" >"$TMP/$name.log" 2>&1; then ok "the $name run ends"
  else bad "the $name run ends"; tail "$TMP/$name.log"; return; fi
  if "$py" - "$TMP/runs/$name/events.jsonl" "$TMP/runs/$name/metrics.jsonl" "$@" <<'PY'
import json, sys
events = [json.loads(line) for line in open(sys.argv[1])]
metrics = [json.loads(line) for line in open(sys.argv[2])]
rules = [e["rule"] for e in events if e["event"] == "change"]
print("rules:", rules)
ooms = [e for e in events if e["event"] == "oom"]
assert ooms and all(e["kind"] == "device" for e in ooms), "no real out-of-memory errors"
for want in sys.argv[3:]:
    assert want in rules, want
trained = [m["step"] for m in metrics]
assert trained == list(range(1, 9)), f"steps trained {trained}, not each of 1..8 once"
PY
  [ $? -eq 0 ] && grep -q ", 0 steps lost" "$TMP/$name.log"
  then ok "$name: the rungs under a real budget, zero steps lost"
  else bad "$name: the rungs under a real budget, zero steps lost"; fi
}

# flow_lora_job NAME VRAM BATCH CHECKPOINTING RESOLUTIONS SAMPLE_EVERY [SAMPLE_SIZE]: the
# flow-matching LoRA job of the family tests (quantize, adamw8bit, EMA, two previews with a
# negative prompt, 8 steps saved every 2) on $TMP/data for $MODEL, with the caller's $JOB_ARCH,
# and optionally $JOB_TYPE (sd_trainer), $JOB_GUIDANCE (4), and extra lines under train:
# ($JOB_TRAIN_KEYS), under model: ($JOB_MODEL_KEYS) and under the dataset ($JOB_DATASET_KEYS),
# each line ending in a newline, $JOB_QUANTIZE (true) and $JOB_SAMPLES for the sample prompts (the prompts: list or a
# samples: list, at sample:'s indentation).
flow_lora_job() {  # NAME VRAM BATCH CHECKPOINTING RESOLUTIONS SAMPLE_EVERY [SAMPLE_SIZE]
  local samples='        prompts:
          - "woman with red hair, playing chess at the park"
          - "a bear building a log cabin in the snow covered mountains"
'
  [ -n "${JOB_SAMPLES:-}" ] && samples="$JOB_SAMPLES"
  cat <<YAML
job: extension
config:
  name: $1
  process:
    - type: '${JOB_TYPE:-sd_trainer}'
      training_folder: $TMP/runs
      device: sim
      training_seed: 13
      network: {type: "lora", linear: 4, linear_alpha: 4}
      save: {dtype: float32, save_every: 2, max_step_saves_to_keep: 4, push_to_hub: false}
      datasets:
        - folder_path: $TMP/data
          caption_ext: "txt"
          caption_dropout_rate: 0.05
          shuffle_tokens: false
          cache_latents_to_disk: true
          resolution: $5
${JOB_DATASET_KEYS:-}      train:
        batch_size: $3
        steps: 8
        gradient_accumulation: 1
        train_unet: true
        train_text_encoder: false
        gradient_checkpointing: $4
        noise_scheduler: "flowmatch"
${JOB_TRAIN_KEYS:-}        optimizer: "adamw8bit"
        lr: 1e-3
        ema_config: {use_ema: true, ema_decay: 0.99}
        dtype: fp32
      model:
        name_or_path: $MODEL
        arch: "$JOB_ARCH"
        quantize: ${JOB_QUANTIZE:-true}
${JOB_MODEL_KEYS:-}      sample:
        sampler: "flowmatch"
        sample_every: $6
        sample_start_step: 0
        width: ${7:-64}
        height: ${7:-64}
${samples}        neg: "blurry"
        seed: 42
        walk_seed: true
        guidance_scale: ${JOB_GUIDANCE:-4}
        sample_steps: 2
      oom: {vram_limit: $2, probe: false}
meta: {name: "[name]", version: '1.0'}
YAML
}

