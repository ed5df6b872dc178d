#!/usr/bin/env bash
# `loom train` on ai-toolkit's two Qwen-Image-Edit example jobs (issue 41), pointed at the tiny
# QwenImageEditPipeline and QwenImageEditPlusPipeline folders of qwen_edit_reference.py, on the
# simulated device:
#   - train_lora_qwen_image_edit_32gb.yaml's keys (arch qwen_image_edit, sd_trainer, a
#     control_path folder, quantize with "uint3|<adapter>" — uint4 is used and said —
#     quantize_te qfloat8, low_vram, cache_text_embeddings, previews editing a ctrl_img at
#     guidance 3): it trains; the LoRA is ai-toolkit's Qwen-Image layout and loads into diffusers'
#     QwenImageEditPipeline with every key used; SIGKILL mid-run and a rerun end on the
#     uninterrupted run's LoRA; under real budgets the rungs act with zero steps lost — the idle
#     text encoder (with its vision tower) and VAE leaving the device as the free first rung of a
#     step; `loom sample --control`;
#   - train_lora_qwen_image_edit_2509_32gb.yaml's keys (arch qwen_image_edit_plus,
#     diffusion_trainer, control_path listing two folders, previews with ctrl_img_1 and
#     ctrl_img_2): it trains with each control's latents at about a megapixel, as the example
#     runs; the LoRA loads into QwenImageEditPlusPipeline; with model_kwargs.match_target_res
#     under a tight budget the rungs act with zero steps lost; `loom sample` with two controls.
#   test_train_qwen_image_edit.sh LOOM MAKE_TINY_FIXTURE PYTHON PARITY_DIR
set -u
LOOM="$1"; FIXTURE="$2"; PY="$3"; PARITY="$4"
source "$(dirname "$0")/lib.sh"
make_fixture "$FIXTURE"
fixture_at_128px "$PY"

# Each image's sources: a mirrored, recoloured one at another aspect, and a second at a third.
"$PY" - "$TMP/data" "$TMP/ctrl" "$TMP/ctrl2" <<'PY' || { echo "FAIL controls"; exit 1; }
import os, sys
from PIL import Image, ImageOps
data, first, second = sys.argv[1:4]
os.makedirs(first); os.makedirs(second)
for name in sorted(os.listdir(data)):
    stem, ext = os.path.splitext(name)
    if ext != ".png":
        continue
    image = Image.open(os.path.join(data, name)).convert("RGB")
    ImageOps.mirror(ImageOps.invert(image)).resize((96, 128)).save(os.path.join(first, stem + ".png"))
    image.rotate(90).resize((128, 80)).save(os.path.join(second, stem + ".jpg"))
PY
STEM=$(ls "$TMP/ctrl" | head -1); STEM="${STEM%.png}"

check_layout() {  # LORA_FILE: ai-toolkit's Qwen-Image layout, the transformer blocks only
  "$PY" - "$1" <<'PY'
import sys
from safetensors.torch import load_file
keys = list(load_file(sys.argv[1]))
assert keys and all(k.startswith("diffusion_model.transformer_blocks.") for k in keys), keys[:3]
for module in ("transformer_blocks.0.attn.to_q", "transformer_blocks.1.attn.add_k_proj",
               "transformer_blocks.0.img_mlp.net.2", "transformer_blocks.1.txt_mod.1"):
    assert f"diffusion_model.{module}.lora_A.weight" in keys, module
PY
}

# ---- Qwen-Image-Edit ---------------------------------------------------------------------------
MODEL="$PARITY/qwenimage_edit"
JOB_ARCH=qwen_image_edit
JOB_GUIDANCE=3
JOB_TRAIN_KEYS='        cache_text_embeddings: true
'
EXAMPLE_MODEL_KEYS='        qtype: "uint3|qwen_image_edit_torchao_uint3.safetensors"
        quantize_te: true
        qtype_te: "qfloat8"
'
JOB_MODEL_KEYS="$EXAMPLE_MODEL_KEYS        low_vram: true
"
JOB_DATASET_KEYS="          control_path: \"$TMP/ctrl\"
"
JOB_SAMPLES="        samples:
          - prompt: \"do the thing to it\"
            ctrl_img: \"$TMP/ctrl/$STEM.png\"
          - prompt: \"make it blue\"
            ctrl_img: \"$TMP/ctrl/$STEM.png\"
"
job() { flow_lora_job "$@"; }

job whole 1GiB 1 true "[64]" 4 >"$TMP/whole.yaml"
job split 1GiB 1 true "[64]" 4 >"$TMP/split.yaml"
if "$LOOM" train "$TMP/whole.yaml" >"$TMP/whole.log" 2>&1 && grep -q "uint4" "$TMP/whole.log"
then ok "the Qwen-Image-Edit example trains (uint3 as uint4)"
else bad "the Qwen-Image-Edit example trains"; tail "$TMP/whole.log"; finish; exit; fi
if ls "$TMP/runs/whole/samples/"*_grid.png >/dev/null 2>&1 && ! grep -q "ctrl_img" "$TMP/whole.log"
then ok "previews edit their ctrl_img"; else bad "previews edit their ctrl_img"; grep ctrl "$TMP/whole.log"; fi
if check_layout "$TMP/runs/whole/whole.safetensors"
then ok "the Edit LoRA is in ai-toolkit's Qwen-Image layout"; else bad "the Edit LoRA is in ai-toolkit's Qwen-Image layout"; fi
# Each caption is encoded with its item's control image, and so is the empty caption of caption
# dropout: 6 images, 12 text entries (a family without controls in its prompts shares one "").
if grep -q "cached 12 text embeddings" "$TMP/whole.log"; then ok "captions cached with their controls"
else bad "captions cached with their controls"; grep "text embeddings" "$TMP/whole.log"; fi

kill_and_resume "$LOOM" "$PY" 3 3

if "$PY" "$(dirname "$0")/../parity/check_trained_lora.py" "$MODEL" \
    "$TMP/runs/whole/whole.safetensors"; then ok "QwenImageEditPipeline loads the trained LoRA"
else bad "QwenImageEditPipeline loads the trained LoRA"; fi

# Under budgets, without low_vram: the rungs on real allocations. Unquantized (quantize starts at
# low_vram 2, the encoders already on the host) with every latent and text embedding cached, the
# first rung of a step is the free one: the text encoder, its vision tower and the VAE leave the
# device. A batch of 12 at 64 px (the 6 images and their mirror images) makes the step's peak
# the run's; at smaller batches or larger images the tiny VAE's encoding peaks above the tiny
# transformer's step.
JOB_MODEL_KEYS="" JOB_QUANTIZE=false TIGHT_BATCH=12 JOB_DATASET_KEYS="$JOB_DATASET_KEYS          flip_x: true
" tight_run "$LOOM" "$PY" free "${EDIT_FREE:-7MiB}" "[64]" \
  free.encoders_off_device train.gradient_checkpointing
JOB_MODEL_KEYS="$EXAMPLE_MODEL_KEYS"
tight_run "$LOOM" "$PY" tight "${EDIT_TIGHT:-2MiB}" "[64, 128]" load.low_vram sample.one_prompt_at_a_time \
  sample.sequential_guidance train.sometimes_largest_bucket
tight_run "$LOOM" "$PY" tighter "${EDIT_TIGHTER:-1536KiB}" "[64]" sample.one_prompt_at_a_time \
  sample.disable train.gradient_checkpointing train.batch_1_accumulate

if "$LOOM" sample --model "$MODEL" --lora "$TMP/runs/whole/whole.safetensors" \
    --prompt "make it red" --neg "blurry" --control "$TMP/ctrl/$STEM.png" --width 64 --height 64 \
    --steps 2 --out "$TMP/out" >"$TMP/sample.log" 2>&1 && ls "$TMP/out"/*.png >/dev/null 2>&1
then ok "loom sample --lora --control"; else bad "loom sample --lora --control"; cat "$TMP/sample.log"; fi
if ! "$LOOM" sample --model "$MODEL" --prompt "x" --width 64 --height 64 --steps 1 \
    --out "$TMP/none" >"$TMP/none.log" 2>&1 && grep -q "give it with --control" "$TMP/none.log"
then ok "loom sample without --control says what to give"; else bad "loom sample without --control"; cat "$TMP/none.log"; fi

# ---- Qwen-Image-Edit-2509 ----------------------------------------------------------------------
MODEL="$PARITY/qwenimage_edit_plus"
JOB_ARCH=qwen_image_edit_plus
JOB_TYPE=diffusion_trainer
EXAMPLE_MODEL_KEYS='        qtype: "uint3|ostris/accuracy_recovery_adapters/qwen_image_edit_2509_torchao_uint3.safetensors"
        quantize_te: true
        qtype_te: "qfloat8"
'
JOB_MODEL_KEYS="$EXAMPLE_MODEL_KEYS        low_vram: true
"
JOB_DATASET_KEYS="          control_path:
            - \"$TMP/ctrl\"
            - \"$TMP/ctrl2\"
"
JOB_SAMPLES="        samples:
          - prompt: \"Do whatever with Image1 and Image2\"
            ctrl_img_1: \"$TMP/ctrl/$STEM.png\"
            ctrl_img_2: \"$TMP/ctrl2/$STEM.jpg\"
"
# One preview (step 0): each encodes both controls at about a megapixel through the VAE in bf16,
# which a CPU without bf16 kernels (AVX2 only) computes with torch's reference loops — minutes
# for the three previews of every 4 steps there.
job plus 1GiB 1 true "[64]" 1000 >"$TMP/plus.yaml"
if "$LOOM" train "$TMP/plus.yaml" >"$TMP/plus.log" 2>&1 && grep -q "uint4" "$TMP/plus.log" &&
   ls "$TMP/runs/plus/samples/"*_grid.png >/dev/null 2>&1
then ok "the Qwen-Image-Edit-2509 example trains with two control folders and previews"
else bad "the Qwen-Image-Edit-2509 example trains"; tail "$TMP/plus.log"; fi
if check_layout "$TMP/runs/plus/plus.safetensors" &&
   "$PY" "$(dirname "$0")/../parity/check_trained_lora.py" "$MODEL" "$TMP/runs/plus/plus.safetensors"
then ok "QwenImageEditPlusPipeline loads the trained LoRA"
else bad "QwenImageEditPlusPipeline loads the trained LoRA"; fi

JOB_MODEL_KEYS="$EXAMPLE_MODEL_KEYS        model_kwargs: {match_target_res: true}
"
tight_run "$LOOM" "$PY" plus_tight "${PLUS_TIGHT:-1536KiB}" "[64]" load.low_vram sample.disable \
  train.gradient_checkpointing train.batch_1_accumulate

if "$LOOM" sample --model "$MODEL" --lora "$TMP/runs/plus/plus.safetensors" \
    --prompt "Picture 1 wearing picture 2" --control "$TMP/ctrl/$STEM.png" \
    --control "$TMP/ctrl2/$STEM.jpg" --width 64 --height 64 --steps 2 --out "$TMP/plus_out" \
    >"$TMP/plus_sample.log" 2>&1 && ls "$TMP/plus_out"/*.png >/dev/null 2>&1
then ok "loom sample with two --control images"; else bad "loom sample with two --control images"; cat "$TMP/plus_sample.log"; fi
finish
