#!/usr/bin/env bash
# `loom train` on ai-toolkit's Qwen-Image example job (train_lora_qwen_image_24gb.yaml's keys:
# arch qwen_image, quantize with qtype "uint3|<accuracy-recovery adapter>" — loom's nearest real
# qtype, uint4, is used and said — quantize_te, low_vram, cache_text_embeddings, adamw8bit,
# resolutions [512, 768, 1024] here [64, 128], previews with a negative prompt at guidance 3)
# pointed at the tiny QwenImagePipeline of qwen_reference.py, on the simulated device (issue 41):
# the run's LoRA is in the layout ai-toolkit writes for Qwen-Image (diffusers' names under
# diffusion_model., the transformer blocks only) and loads into diffusers' QwenImagePipeline
# with every key used; killed with SIGKILL mid-run and rerun, it resumes and ends on the LoRA of
# an uninterrupted run; under budgets the previews and steps do not fit, the rungs act on real
# allocations with zero steps lost, the idle text encoder leaving the device as a step's free
# first rung; `loom sample --lora` applies the LoRA, with a negative prompt.
#   test_train_qwen_image.sh LOOM MAKE_TINY_FIXTURE PYTHON PARITY_DIR
set -u
LOOM="$1"; FIXTURE="$2"; PY="$3"; PARITY="$4"
source "$(dirname "$0")/lib.sh"
make_fixture "$FIXTURE"
MODEL="$PARITY/qwenimage"

fixture_at_128px "$PY"

JOB_ARCH=qwen_image
JOB_GUIDANCE=3
JOB_TRAIN_KEYS='        cache_text_embeddings: true
'
JOB_MODEL_KEYS='        qtype: "uint3|ostris/accuracy_recovery_adapters/qwen_image_torchao_uint3.safetensors"
        quantize_te: true
        qtype_te: "qfloat8"
'
job() { flow_lora_job "$@"; }


job whole 1GiB 1 true "[64]" 4 >"$TMP/whole.yaml"
job split 1GiB 1 true "[64]" 4 >"$TMP/split.yaml"
if "$LOOM" train "$TMP/whole.yaml" >"$TMP/whole.log" 2>&1 &&
   grep -q "uint4" "$TMP/whole.log"; then ok "the Qwen-Image example trains (uint3 as uint4)"
else bad "the Qwen-Image example trains"; tail "$TMP/whole.log"; finish; exit; fi
if ls "$TMP/runs/whole/samples/"*.png >/dev/null 2>&1
then ok "previews with a negative prompt"; else bad "previews with a negative prompt"; ls -R "$TMP/runs/whole"; fi

# ai-toolkit's Qwen-Image layout: diffusers' names under diffusion_model., the blocks only.
if "$PY" - "$TMP/runs/whole/whole.safetensors" <<'PY'
import sys
from safetensors.torch import load_file
keys = list(load_file(sys.argv[1]))
assert keys and all(k.startswith("diffusion_model.transformer_blocks.") for k in keys), keys[:3]
for module in ("transformer_blocks.0.attn.to_q", "transformer_blocks.1.attn.add_k_proj",
               "transformer_blocks.0.img_mlp.net.2", "transformer_blocks.1.txt_mod.1"):
    assert f"diffusion_model.{module}.lora_A.weight" in keys, module
    assert f"diffusion_model.{module}.lora_B.weight" in keys, module
PY
then ok "the LoRA is in ai-toolkit's Qwen-Image layout"; else bad "the LoRA is in ai-toolkit's Qwen-Image layout"; fi

kill_and_resume "$LOOM" "$PY" 3 3  # killed after a step in 3..5

if "$PY" "$(dirname "$0")/../parity/check_trained_lora.py" "$MODEL" \
    "$TMP/runs/whole/whole.safetensors"; then ok "QwenImagePipeline loads the trained LoRA"
else bad "QwenImagePipeline loads the trained LoRA"; fi

# The tiny Qwen-Image's step is small (its captions are their real tokens only), so the budgets
# are: 2 MiB with two buckets — the model loads only in low_vram, the previews step down, and the
# 128 px bucket is dropped some of the time; 800 KiB with one bucket — every rung: low_vram, the
# previews one prompt at a time, their guidance passes in turn, halved until disabled, and the
# step with checkpointing, then batch 1 with accumulation.
tight_run "$LOOM" "$PY" tight "${QWEN_TIGHT:-2MiB}" "[64, 128]" load.low_vram sample.one_prompt_at_a_time \
  sample.sequential_guidance sample.halve_size train.sometimes_largest_bucket
tight_run "$LOOM" "$PY" tighter "${QWEN_TIGHTER:-800KiB}" "[64]" load.low_vram sample.one_prompt_at_a_time \
  sample.sequential_guidance sample.halve_size sample.disable train.gradient_checkpointing \
  train.batch_1_accumulate

# The free rung: unquantized (quantize starts at low_vram 2, the encoders on the host already),
# every latent and text embedding cached, a step's first rung sends the idle text encoder and
# VAE to the host. A batch of 12 at 64 px (the images and their mirror images) makes the step's
# peak the run's; otherwise the tiny VAE's encoding peaks above the tiny transformer's step.
JOB_QUANTIZE=false TIGHT_BATCH=12 JOB_DATASET_KEYS="          flip_x: true
" tight_run "$LOOM" "$PY" free "${QWEN_FREE:-7MiB}" "[64]" free.encoders_off_device \
  train.gradient_checkpointing

if "$LOOM" sample --model "$MODEL" --lora "$TMP/runs/whole/whole.safetensors" \
    --prompt "a bear building a log cabin" --neg "blurry" --width 64 --height 64 --steps 2 \
    --out "$TMP/out" >"$TMP/sample.log" 2>&1 && ls "$TMP/out"/*.png >/dev/null 2>&1 &&
   ! grep -q "no negative prompt" "$TMP/sample.log"
then ok "loom sample --lora --neg"; else bad "loom sample --lora --neg"; cat "$TMP/sample.log"; fi
finish
