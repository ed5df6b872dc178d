#!/usr/bin/env bash
# `loom train` on ai-toolkit's Chroma example job (train_lora_chroma_24gb.yaml's keys: arch
# chroma, quantize, adamw8bit, ema, resolutions [512, 768, 1024] here [64, 128], previews with a
# negative prompt and guidance 4) pointed at the tiny ChromaPipeline of flux_reference.py, on the
# simulated device (issue 40): the run's LoRA is in the layout ai-toolkit writes for Chroma (BFL
# names under diffusion_model., q/k/v fused) and loads into diffusers' ChromaPipeline with every
# key used (converted to diffusers' names first: check_trained_lora.py says why); killed with
# SIGKILL mid-run and rerun, it resumes and ends on the LoRA of an uninterrupted run; under a
# budget the example's previews and steps do not fit, the rungs act on real allocations with zero
# steps lost; `loom sample --lora` applies the LoRA, with a negative prompt.
#   test_train_chroma.sh LOOM MAKE_TINY_FIXTURE PYTHON PARITY_DIR
set -u
LOOM="$1"; FIXTURE="$2"; PY="$3"; PARITY="$4"
source "$(dirname "$0")/lib.sh"
make_fixture "$FIXTURE"
MODEL="$PARITY/chroma"

fixture_at_128px "$PY"

JOB_ARCH=chroma
job() { flow_lora_job "$@"; }

job whole 1GiB 1 true "[64]" 4 >"$TMP/whole.yaml"
job split 1GiB 1 true "[64]" 4 >"$TMP/split.yaml"
if "$LOOM" train "$TMP/whole.yaml" >"$TMP/whole.log" 2>&1; then ok "the Chroma example trains"
else bad "the Chroma example trains"; tail "$TMP/whole.log"; finish; exit; fi
if ls "$TMP/runs/whole/samples/"*.png >/dev/null 2>&1
then ok "previews with a negative prompt"; else bad "previews with a negative prompt"; ls -R "$TMP/runs/whole"; fi

# ai-toolkit's Chroma layout: every key under diffusion_model. in BFL's names, q/k/v fused.
if "$PY" - "$TMP/runs/whole/whole.safetensors" <<'PY'
import sys
from safetensors.torch import load_file
keys = list(load_file(sys.argv[1]))
assert keys and all(k.startswith("diffusion_model.") for k in keys), keys[:3]
assert not any("transformer_blocks" in k or k.endswith(".alpha") for k in keys), keys[:3]
for fused in ("double_blocks.0.img_attn.qkv", "double_blocks.1.txt_attn.qkv",
              "single_blocks.0.linear1", "single_blocks.1.linear2"):
    assert f"diffusion_model.{fused}.lora_A.weight" in keys, fused
PY
then ok "the LoRA is in ai-toolkit's Chroma layout"; else bad "the LoRA is in ai-toolkit's Chroma layout"; fi

kill_and_resume "$LOOM" "$PY" 3 3  # killed after a step in 3..5

if "$PY" "$(dirname "$0")/../parity/check_trained_lora.py" "$MODEL" \
    "$TMP/runs/whole/whole.safetensors"; then ok "ChromaPipeline loads the trained LoRA"
else bad "ChromaPipeline loads the trained LoRA"; fi

# TIGHT holds the model but not 256 px previews of both prompts with their negative pass, nor a
# batch-2 step at the 128 px bucket without checkpointing: real allocations, none injected, step
# down the ladder. (A step's peak is its joint attention over T5's 512 tokens and the image's:
# the CPU's attention with ChromaPipeline's mask as a bias materialises the scores.)
TIGHT="${CHROMA_TIGHT:-18.5MiB}"
job tight "$TIGHT" 2 false "[64, 128]" 4 256 >"$TMP/tight.yaml"
if "$LOOM" train "$TMP/tight.yaml" >"$TMP/tight.log" 2>&1; then ok "the tight-budget Chroma run ends"
else bad "the tight-budget Chroma run ends"; tail "$TMP/tight.log"; fi
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
assert {"train.drop_largest_bucket", "train.sometimes_largest_bucket"} & set(steps), steps
trained = [m["step"] for m in metrics]
assert trained == list(range(1, 9)), f"steps trained {trained}, not each of 1..8 once"
PY
[ $? -eq 0 ] && grep -q ", 0 steps lost" "$TMP/tight.log"
then ok "the rungs under a real budget, zero steps lost"
else bad "the rungs under a real budget, zero steps lost"; fi

if "$LOOM" sample --model "$MODEL" --lora "$TMP/runs/whole/whole.safetensors" \
    --prompt "a bear building a log cabin" --neg "blurry" --width 64 --height 64 --steps 2 \
    --out "$TMP/out" >"$TMP/sample.log" 2>&1 && ls "$TMP/out"/*.png >/dev/null 2>&1 &&
   ! grep -q "no negative prompt" "$TMP/sample.log"
then ok "loom sample --lora --neg"; else bad "loom sample --lora --neg"; cat "$TMP/sample.log"; fi
finish
