#!/usr/bin/env bash
# `loom train` on single-file checkpoints (model/sd/single_file.h): an SD 1.x and an SDXL job whose
# model.name_or_path is one .safetensors in the original layout train LoRAs equal to the same job
# on the diffusers folder the file was converted from (same seed: the same model, so the same
# LoRA); without the default repo's tokenizer in the cache the job stops at once naming the
# download; `loom sample` draws from the file with the LoRA; `loom inspect` describes the file.
# Models: single_file_reference.py's.
#   test_train_single_file.sh LOOM MAKE_TINY_FIXTURE PYTHON PARITY_DIR
set -u
LOOM="$1"; FIXTURE="$2"; PY="$3"; PARITY="$4"
source "$(dirname "$0")/lib.sh"
make_fixture "$FIXTURE"
export HF_HUB_CACHE="$PARITY/single_file/hub"

job() {  # job NAME MODEL ARCH: lib.sh's tiny job on another model
  tiny_job "$1" 4 100 | sed "s|model: {.*}|model: {name_or_path: $2, arch: $3}|"
}

for arch in sd1 sdxl; do
  job "${arch}_file" "$PARITY/single_file/$arch.safetensors" "$arch" >"$TMP/${arch}_file.yaml"
  job "${arch}_folder" "$PARITY/single_file/${arch}_folder" "$arch" >"$TMP/${arch}_folder.yaml"
  for kind in file folder; do
    if "$LOOM" train "$TMP/${arch}_$kind.yaml" --no-supervise >"$TMP/${arch}_$kind.log" 2>&1
    then ok "$arch job on the $kind trains"
    else bad "$arch job on the $kind trains"; tail -5 "$TMP/${arch}_$kind.log"; fi
  done
  if "$PY" "$LORA_DIFFERENCE" "$TMP/runs/${arch}_file/${arch}_file.safetensors" \
      "$TMP/runs/${arch}_folder/${arch}_folder.safetensors" --max 0
  then ok "$arch: the LoRA trained on the file equals the folder's"
  else bad "$arch: the LoRA trained on the file equals the folder's"; fi
done

# The tokenizer is not in the file: an empty cache stops the job before training, naming it.
HF_HUB_CACHE="$TMP/empty_cache" "$LOOM" train "$TMP/sdxl_file.yaml" --no-supervise --fresh \
  >"$TMP/no_cache.log" 2>&1
code=$?
if [ "$code" -ne 0 ] && grep -q "huggingface-cli download stabilityai/stable-diffusion-xl-base-1.0 --include 'tokenizer/\*' 'tokenizer_2/\*' 'scheduler/\*'" "$TMP/no_cache.log"
then ok "without the cached tokenizer: exit $code, naming the download"
else bad "without the cached tokenizer (exit $code)"; cat "$TMP/no_cache.log"; fi

if "$LOOM" sample --model "$PARITY/single_file/sd1.safetensors" \
    --lora "$TMP/runs/sd1_file/sd1_file.safetensors" --prompt "a dog" --width 64 --height 64 \
    --steps 2 --out "$TMP/out" >"$TMP/sample.log" 2>&1 && ls "$TMP/out"/*.png >/dev/null 2>&1
then ok "loom sample on the file with its LoRA"; else bad "loom sample on the file"; cat "$TMP/sample.log"; fi

if "$LOOM" inspect "$PARITY/single_file/sdxl.safetensors" >"$TMP/inspect.log" 2>&1 &&
   grep -q "arch:     sdxl" "$TMP/inspect.log" && grep -q "text_encoder_2" "$TMP/inspect.log"
then ok "loom inspect describes the file"; else bad "loom inspect"; cat "$TMP/inspect.log"; fi

finish
