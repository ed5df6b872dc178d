#!/usr/bin/env bash
# `loom train` on a Flux.1 job (ai-toolkit's keys: is_flux, noise_scheduler flowmatch, sampler
# flowmatch) on the simulated device: killed with SIGKILL mid-run and rerun, it resumes and ends on
# the LoRA of an uninterrupted run; diffusers' FluxPipeline loads that LoRA with every key used;
# `loom sample --lora` applies it. The model is make_reference.py's tiny Flux.
#   test_train_flux.sh LOOM MAKE_TINY_FIXTURE PYTHON PARITY_DIR
set -u
LOOM="$1"; FIXTURE="$2"; PY="$3"; PARITY="$4"
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
      device: sim
      training_seed: 7
      trigger_word: sks
      network: {type: lora, linear: 4, linear_alpha: 4}
      save: {save_every: 2, dtype: float32, max_step_saves_to_keep: 3}
      datasets:
        - folder_path: $TMP/fixture/data
          resolution: [64]
          caption_dropout_rate: 0.05
      train: {steps: 10, lr: 1e-3, batch_size: 2, gradient_checkpointing: true,
              noise_scheduler: flowmatch, optimizer: adamw, disable_sampling: true}
      model: {name_or_path: $PARITY/flux, is_flux: true}
      sample: {sampler: flowmatch, width: 64, height: 64, sample_steps: 2,
               prompts: ['[trigger] dog']}
      oom: {vram_limit: 1GiB, probe: false}
YAML
}
job whole >"$TMP/whole.yaml"
job split >"$TMP/split.yaml"
if "$LOOM" train "$TMP/whole.yaml" >"$TMP/whole.log" 2>&1; then ok "uninterrupted Flux run"
else bad "uninterrupted Flux run"; tail "$TMP/whole.log"; finish; exit; fi

kill_and_resume "$LOOM" "$PY" 3 5  # killed after a step in 3..7

if "$PY" "$(dirname "$0")/../parity/check_trained_lora.py" "$PARITY/flux" \
    "$TMP/runs/whole/whole.safetensors"; then ok "diffusers loads the trained Flux LoRA"
else bad "diffusers loads the trained Flux LoRA"; fi

if "$LOOM" sample --model "$PARITY/flux" --lora "$TMP/runs/whole/whole.safetensors" \
    --prompt "sks dog" --width 64 --height 64 --steps 2 --out "$TMP/out" >"$TMP/sample.log" 2>&1 &&
   ls "$TMP/out"/*.png >/dev/null 2>&1
then ok "loom sample with the trained LoRA"; else bad "loom sample with the trained LoRA"; cat "$TMP/sample.log"; fi
# Flux's sampler is fixed and has no negative prompt: --sampler is refused, --neg warned.
"$LOOM" sample --model "$PARITY/flux" --prompt "a dog" --sampler euler --out "$TMP/o2" \
  >"$TMP/sampler.log" 2>&1
code=$?
if [ "$code" -ne 0 ] && grep -q -- "--sampler does not apply to Flux" "$TMP/sampler.log"
then ok "loom sample --sampler is refused for Flux (exit $code)"; else bad "loom sample --sampler is refused for Flux"; cat "$TMP/sampler.log"; fi
if "$LOOM" sample --model "$PARITY/flux" --prompt "a dog" --neg "blurry" --width 64 --height 64 \
    --steps 1 --out "$TMP/o3" >"$TMP/neg.log" 2>&1 && grep -q "no negative prompt" "$TMP/neg.log"
then ok "loom sample --neg is warned for Flux"; else bad "loom sample --neg is warned for Flux"; cat "$TMP/neg.log"; fi
finish
