#!/usr/bin/env bash
# `loom train` on ai-toolkit's Flux Kontext example job (train_lora_flux_kontext_24gb.yaml's keys:
# arch flux_kontext, datasets with control_path, quantize, timestep_type weighted, previews with
# --ctrl_img) pointed at the tiny FluxKontextPipeline of flux_reference.py, on the simulated
# device (issue 40): a dataset image without its control image is an error naming it and nothing
# trains; the run's LoRA is loaded by diffusers' FluxKontextPipeline with every key used; killed
# with SIGKILL mid-run and rerun, it resumes and ends on the LoRA of an uninterrupted run; under a
# budget the example's previews and steps do not fit, the rungs act on real allocations with zero
# steps lost, the bucket rung shrinking the control latents with their targets; `loom sample
# --lora --control` edits an image.
#   test_train_kontext.sh LOOM MAKE_TINY_FIXTURE PYTHON PARITY_DIR
set -u
LOOM="$1"; FIXTURE="$2"; PY="$3"; PARITY="$4"
source "$(dirname "$0")/lib.sh"
make_fixture "$FIXTURE"
MODEL="$PARITY/flux_kontext"

# The dataset: the fixture's images and captions at 128 px (so a 64 and a 128 bucket exist), and
# their control (source) images: each image's colours inverted, under the same stem.
"$PY" - "$TMP/fixture/data" "$TMP/data" "$TMP/control" <<'PY' || { echo "FAIL control images"; exit 1; }
import os, shutil, sys
from PIL import Image, ImageOps
src, data, control = sys.argv[1:4]
os.makedirs(data)
os.makedirs(control)
for name in sorted(os.listdir(src)):
    stem, ext = os.path.splitext(name)
    if ext.lower() in (".png", ".jpg", ".jpeg", ".webp"):
        image = Image.open(os.path.join(src, name)).convert("RGB").resize((128, 128))
        image.save(os.path.join(data, stem + ".png"))
        ImageOps.invert(image).save(os.path.join(control, stem + ".png"))
    elif ext == ".txt":
        shutil.copy(os.path.join(src, name), os.path.join(data, name))
PY
FIRST_CONTROL="$(ls "$TMP/control" | head -n1)"

job() {  # job NAME VRAM BATCH CHECKPOINTING RESOLUTIONS SAMPLE_EVERY [CONTROL_PATH]
  cat <<YAML
job: extension
config:
  name: $1
  process:
    - type: 'sd_trainer'
      training_folder: $TMP/runs
      device: sim
      training_seed: 11
      network: {type: "lora", linear: 4, linear_alpha: 4}
      save: {dtype: float32, save_every: 2, max_step_saves_to_keep: 4, push_to_hub: false}
      datasets:
        - folder_path: $TMP/data
          control_path: ${7:-$TMP/control}
          caption_ext: "txt"
          caption_dropout_rate: 0.05
          shuffle_tokens: false
          cache_latents_to_disk: true
          resolution: $5
      train:
        batch_size: $3
        steps: 8
        gradient_accumulation_steps: 1
        train_unet: true
        train_text_encoder: false
        gradient_checkpointing: $4
        noise_scheduler: "flowmatch"
        optimizer: "adamw8bit"
        lr: 1e-3
        timestep_type: "weighted"
        dtype: fp32
      model:
        name_or_path: $MODEL
        arch: "flux_kontext"
        quantize: true
      sample:
        sampler: "flowmatch"
        sample_every: $6
        sample_start_step: 0
        width: 64
        height: 64
        prompts:
          - "make the person smile  --ctrl_img $TMP/control/$FIRST_CONTROL"
          - "turn this image into a cartoon  --ctrl_img $TMP/control/$FIRST_CONTROL"
        neg: ""
        seed: 42
        walk_seed: true
        guidance_scale: 4
        sample_steps: 2
      oom: {vram_limit: $2, probe: false}
meta: {name: "[name]", version: '1.0'}
YAML
}

# A dataset image without its control image: an error naming the image, before any step.
mkdir -p "$TMP/partial"; cp "$TMP/control"/* "$TMP/partial/"; rm "$TMP/partial/$FIRST_CONTROL"
job missing 1GiB 1 true "[64]" 1000 "$TMP/partial" >"$TMP/missing.yaml"
"$LOOM" train "$TMP/missing.yaml" >"$TMP/missing.log" 2>&1
code=$?
stem="${FIRST_CONTROL%.*}"
if [ "$code" -ne 0 ] && grep -q "$stem.* has no control image in control_path $TMP/partial" "$TMP/missing.log" &&
   [ ! -f "$TMP/runs/missing/metrics.jsonl" -o ! -s "$TMP/runs/missing/metrics.jsonl" ]
then ok "a missing control image is an error naming the image (exit $code)"
else bad "a missing control image is an error naming the image"; tail -5 "$TMP/missing.log"; fi

job whole 1GiB 1 true "[64]" 4 >"$TMP/whole.yaml"
job split 1GiB 1 true "[64]" 4 >"$TMP/split.yaml"
if "$LOOM" train "$TMP/whole.yaml" >"$TMP/whole.log" 2>&1; then ok "the Kontext example trains"
else bad "the Kontext example trains"; tail "$TMP/whole.log"; finish; exit; fi
if ls "$TMP/runs/whole/samples/"*.png >/dev/null 2>&1
then ok "previews with a control image"; else bad "previews with a control image"; ls -R "$TMP/runs/whole"; fi

kill_and_resume "$LOOM" "$PY" 3 3  # killed after a step in 3..5

if "$PY" "$(dirname "$0")/../parity/check_trained_lora.py" "$MODEL" \
    "$TMP/runs/whole/whole.safetensors"; then ok "FluxKontextPipeline loads the trained LoRA"
else bad "FluxKontextPipeline loads the trained LoRA"; fi

# TIGHT holds the model but not the example's previews, nor a batch-2 step at the 128 px bucket
# without checkpointing: real allocations, none injected, step down the ladder; the 64 px bucket
# that remains trains with its controls at 64 px too (a 128 px control would not fit).
TIGHT="${KONTEXT_TIGHT:-8MiB}"
job tight "$TIGHT" 2 false "[64, 128]" 4 >"$TMP/tight.yaml"
if "$LOOM" train "$TMP/tight.yaml" >"$TMP/tight.log" 2>&1; then ok "the tight-budget Kontext run ends"
else bad "the tight-budget Kontext run ends"; tail "$TMP/tight.log"; fi
if "$PY" - "$TMP/runs/tight/events.jsonl" "$TMP/runs/tight/metrics.jsonl" <<'PY'
import json, sys
events = [json.loads(line) for line in open(sys.argv[1])]
metrics = [json.loads(line) for line in open(sys.argv[2])]
rules = [e["rule"] for e in events if e["event"] == "change"]
print("rules:", rules)
ooms = [e for e in events if e["event"] == "oom"]
assert ooms and all(e["kind"] == "device" for e in ooms), "no real out-of-memory errors"
assert any(r.startswith("sample.") for r in rules), rules
steps = [r for r in rules if r.startswith("train.")]
assert "train.batch_1_accumulate" in steps and "train.gradient_checkpointing" in steps, steps
# After the smaller bucket has trained, the bucket rung is its "sometimes" form.
assert {"train.drop_largest_bucket", "train.sometimes_largest_bucket"} & set(steps), steps
buckets = {b for m in metrics[-3:] for b in m["buckets"]}
assert buckets == {"64x64"}, f"the last steps trained buckets {buckets}, not 64x64 only"
trained = [m["step"] for m in metrics]
assert trained == list(range(1, 9)), f"steps trained {trained}, not each of 1..8 once"
PY
[ $? -eq 0 ] && grep -q ", 0 steps lost" "$TMP/tight.log"
then ok "the rungs under a real budget (the bucket rung shrinks the controls), zero steps lost"
else bad "the rungs under a real budget (the bucket rung shrinks the controls), zero steps lost"; fi

if "$LOOM" sample --model "$MODEL" --lora "$TMP/runs/whole/whole.safetensors" \
    --prompt "make the person smile" --control "$TMP/control/$FIRST_CONTROL" --width 64 \
    --height 64 --steps 2 --out "$TMP/out" >"$TMP/sample.log" 2>&1 &&
   ls "$TMP/out"/*.png >/dev/null 2>&1
then ok "loom sample --lora --control"; else bad "loom sample --lora --control"; cat "$TMP/sample.log"; fi
"$LOOM" sample --model "$PARITY/flux" --prompt "a dog" --control "$TMP/control/$FIRST_CONTROL" \
  --out "$TMP/o2" >"$TMP/refused.log" 2>&1
code=$?
if [ "$code" -ne 0 ] && grep -q -- "--control does not apply to Flux.1" "$TMP/refused.log"
then ok "loom sample --control is refused for Flux.1 dev (exit $code)"
else bad "loom sample --control is refused for Flux.1 dev"; cat "$TMP/refused.log"; fi
finish
