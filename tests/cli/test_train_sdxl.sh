#!/usr/bin/env bash
# An SDXL LoRA trains on the simulated device (two text encoders, pooled embeddings, time ids)
# and `loom sample --lora` applies it; the model is make_reference.py's tiny SDXL.
#   test_train_sdxl.sh LOOM MAKE_TINY_FIXTURE PARITY_DIR
set -u
LOOM="$1"; FIXTURE="$2"; PARITY="$3"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
export LOOM_HOME="$TMP/home"  # a store of its own: no plan recorded elsewhere is reused
"$FIXTURE" "$TMP/fixture" >/dev/null || { echo "FAIL fixture"; exit 1; }
cat >"$TMP/job.yaml" <<YAML
job: extension
config:
  name: sdxl_lora
  process:
    - type: sd_trainer
      training_folder: $TMP/runs
      device: sim
      training_seed: 3
      trigger_word: sks
      network: {linear: 4, linear_alpha: 4}
      save: {save_every: 2, dtype: float16, format: peft}
      datasets:
        - folder_path: $TMP/fixture/data
          resolution: [64]
          cache_latents: true
      train: {steps: 3, lr: 1e-3, batch_size: 2}
      model: {name_or_path: $PARITY/sdxl, arch: sdxl}
      sample: {sampler: euler, width: 64, height: 64, sample_steps: 2, prompts: ['[trigger] dog', 'a cat']}
      oom: {vram_limit: 1GiB}
YAML
passed=0; failed=0
check() { if eval "$2"; then passed=$((passed + 1)); else echo "FAIL $1"; failed=$((failed + 1)); fi; }
"$LOOM" train "$TMP/job.yaml" >"$TMP/train.log" 2>&1
check "loom train exits 0" '[ $? -eq 0 ] || tail -5 "$TMP/train.log"'
check "final LoRA" '[ -f "$TMP/runs/sdxl_lora/sdxl_lora.safetensors" ]'
check "three metrics lines" '[ "$(wc -l <"$TMP/runs/sdxl_lora/metrics.jsonl")" -eq 3 ]'
check "samples and grids" '[ "$(ls "$TMP/runs/sdxl_lora/samples" | grep -c png)" -eq 6 ]'
"$LOOM" sample --model "$PARITY/sdxl" --lora "$TMP/runs/sdxl_lora/sdxl_lora.safetensors" \
  --prompt "sks dog" --prompt "a cat" --width 64 --height 64 --steps 2 --out "$TMP/out" >"$TMP/sample.log" 2>&1
check "loom sample with the LoRA" '[ -f "$TMP/out/sample_0.png" ] && [ -f "$TMP/out/sample_1.png" ] || cat "$TMP/sample.log"'
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
