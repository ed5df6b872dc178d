#!/usr/bin/env bash
# `loom train` on a Z-Image job as ai-toolkit's UI writes one (configs/zimage_lora.yaml's keys:
# arch zimage, quantize, adamw8bit, weighted timesteps, resolutions [512, 768, 1024] here
# [64, 128], previews with a negative prompt and guidance 4) pointed at the tiny ZImagePipeline
# of zimage_reference.py, on the simulated device (issue 42): the run's LoRA is in the layout
# ai-toolkit writes for Z-Image (diffusers' names under diffusion_model., the main layers only)
# and loads into diffusers' ZImagePipeline with every key used; killed with SIGKILL mid-run and
# rerun, it resumes and ends on the LoRA of an uninterrupted run; under a budget the previews and
# steps do not fit, the rungs act on real allocations with zero steps lost; `loom sample --lora`
# applies the LoRA, with a negative prompt.
#   test_train_zimage.sh LOOM MAKE_TINY_FIXTURE PYTHON PARITY_DIR
set -u
LOOM="$1"; FIXTURE="$2"; PY="$3"; PARITY="$4"
source "$(dirname "$0")/lib.sh"
make_fixture "$FIXTURE"
MODEL="$PARITY/zimage"

fixture_at_128px "$PY"

JOB_ARCH=zimage
JOB_TYPE=diffusion_trainer
JOB_TRAIN_KEYS='        timestep_type: "weighted"
'
job() { flow_lora_job "$@"; }


job whole 1GiB 1 true "[64]" 4 >"$TMP/whole.yaml"
job split 1GiB 1 true "[64]" 4 >"$TMP/split.yaml"
if "$LOOM" train "$TMP/whole.yaml" >"$TMP/whole.log" 2>&1; then ok "the Z-Image job trains"
else bad "the Z-Image job trains"; tail "$TMP/whole.log"; finish; exit; fi
if ls "$TMP/runs/whole/samples/"*.png >/dev/null 2>&1
then ok "previews with a negative prompt"; else bad "previews with a negative prompt"; ls -R "$TMP/runs/whole"; fi

# ai-toolkit's Z-Image layout: diffusers' names under diffusion_model., the main layers only.
if "$PY" - "$TMP/runs/whole/whole.safetensors" <<'PY'
import sys
from safetensors.torch import load_file
keys = list(load_file(sys.argv[1]))
assert keys and all(k.startswith("diffusion_model.layers.") for k in keys), keys[:3]
for module in ("layers.0.attention.to_q", "layers.1.attention.to_out.0",
               "layers.0.feed_forward.w2", "layers.1.adaLN_modulation.0"):
    assert f"diffusion_model.{module}.lora_A.weight" in keys, module
    assert f"diffusion_model.{module}.lora_B.weight" in keys, module
PY
then ok "the LoRA is in ai-toolkit's Z-Image layout"; else bad "the LoRA is in ai-toolkit's Z-Image layout"; fi

# model.assistant_lora_path (Turbo's training adapter): a LoRA in ai-toolkit's layout on every
# Linear of the main layers, merged into the base for training and taken out of the previews —
# so the first preview (the trained LoRA still zero) is the plain run's, while the LoRA trains
# on the merged model and differs from the plain run's, and never holds the adapter.
"$PY" - "$MODEL/transformer" "$TMP/adapter.safetensors" <<'PY' || bad "writing the adapter"
import glob, sys, torch
from safetensors.torch import load_file, save_file
weights = {}
for f in glob.glob(sys.argv[1] + "/*.safetensors"):
    weights.update(load_file(f))
g = torch.Generator().manual_seed(3)
out = {}
for key, w in sorted(weights.items()):
    if key.startswith("layers.") and key.endswith(".weight") and w.dim() == 2:
        stem = "diffusion_model." + key[: -len(".weight")]
        out[stem + ".lora_A.weight"] = torch.randn(2, w.shape[1], generator=g) * 0.3
        out[stem + ".lora_B.weight"] = torch.randn(w.shape[0], 2, generator=g) * 0.3
save_file(out, sys.argv[2])
PY
# Unquantized, both: quantizing the merged weights rounds them otherwise than the plain ones.
job plain 1GiB 1 true "[64]" 4 | sed "s|quantize: true|quantize: false|" >"$TMP/plain.yaml"
job assist 1GiB 1 true "[64]" 4 | sed "s|quantize: true|quantize: false|" >"$TMP/assist.yaml"
sed -i "s|        arch: \"zimage\"|        arch: \"zimage:turbo\"\n        assistant_lora_path: $TMP/adapter.safetensors|" \
  "$TMP/assist.yaml"
if "$LOOM" train "$TMP/plain.yaml" >"$TMP/plain.log" 2>&1 &&
   "$LOOM" train "$TMP/assist.yaml" >"$TMP/assist.log" 2>&1 && grep -q "merged into the base" "$TMP/assist.log"
then ok "a job with model.assistant_lora_path trains"
else bad "a job with model.assistant_lora_path trains"; tail "$TMP/assist.log"; fi
if "$PY" - "$TMP/runs/plain" "$TMP/runs/assist" <<'PY'
import os, sys
import numpy as np
from PIL import Image
from safetensors.torch import load_file
whole, assist = sys.argv[1:3]
def first_previews(run):
    names = sorted(os.listdir(os.path.join(run, "samples")))
    step0 = [n for n in names if "__000000000_" in n and "grid" not in n]
    assert len(step0) == 2, names
    return [np.asarray(Image.open(os.path.join(run, "samples", n)), dtype=np.int16) for n in step0]
for a, b in zip(first_previews(whole), first_previews(assist)):
    assert np.abs(a - b).max() <= 1, np.abs(a - b).max()
plain = load_file(os.path.join(whole, "plain.safetensors"))
trained = load_file(os.path.join(assist, "assist.safetensors"))
assert sorted(plain) == sorted(trained), "the LoRA holds other keys than the plain run's"
diff = max((plain[k] - trained[k]).abs().max().item() for k in plain)
assert diff > 1e-4, f"the LoRA trained as if there were no adapter ({diff})"
print(f"first previews equal the plain run's; LoRAs differ by {diff:.3g}")
PY
then ok "the adapter shapes training and is taken out of previews"
else bad "the adapter shapes training and is taken out of previews"; ls "$TMP/runs/assist/samples"; fi

kill_and_resume "$LOOM" "$PY" 3 3  # killed after a step in 3..5

if "$PY" "$(dirname "$0")/../parity/check_trained_lora.py" "$MODEL" \
    "$TMP/runs/whole/whole.safetensors"; then ok "ZImagePipeline loads the trained LoRA"
else bad "ZImagePipeline loads the trained LoRA"; fi

# The tiny model's step is dominated by its largest bucket: under 12 MiB the previews step down
# and the 128 px bucket is dropped some of the time. With one bucket and 3 MiB every rung acts:
# the model loads only in low_vram, the previews go one prompt at a time, their guidance passes
# one after the other, their size halves until they are disabled, and the step takes
# checkpointing, then batch 1 with accumulation.
tight_run "$LOOM" "$PY" tight "${ZIMAGE_TIGHT:-12MiB}" "[64, 128]" sample.one_prompt_at_a_time \
  sample.sequential_guidance sample.halve_size train.sometimes_largest_bucket
tight_run "$LOOM" "$PY" tighter "${ZIMAGE_TIGHTER:-3MiB}" "[64]" load.low_vram sample.one_prompt_at_a_time \
  sample.sequential_guidance sample.halve_size sample.disable train.gradient_checkpointing \
  train.batch_1_accumulate

if "$LOOM" sample --model "$MODEL" --lora "$TMP/runs/whole/whole.safetensors" \
    --prompt "a bear building a log cabin" --neg "blurry" --width 64 --height 64 --steps 2 \
    --out "$TMP/out" >"$TMP/sample.log" 2>&1 && ls "$TMP/out"/*.png >/dev/null 2>&1 &&
   ! grep -q "no negative prompt" "$TMP/sample.log"
then ok "loom sample --lora --neg"; else bad "loom sample --lora --neg"; cat "$TMP/sample.log"; fi
finish
