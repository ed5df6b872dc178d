#!/usr/bin/env bash
# `loom train` on a Wan 2.1 job (ai-toolkit's keys: arch wan21, noise_scheduler flowmatch) on the
# simulated device, images as one-frame clips: previews with guidance are written; killed with
# SIGKILL mid-run and rerun, it resumes and ends on the LoRA of an uninterrupted run; diffusers'
# WanPipeline loads that LoRA with every key used; under a budget too small for the job's plan the
# ladder's rungs act in order with zero steps lost; `loom sample --lora` applies the LoRA. The
# model is wan_reference.py's tiny WanPipeline.
#   test_train_wan.sh LOOM MAKE_TINY_FIXTURE PYTHON PARITY_DIR
set -u
LOOM="$1"; FIXTURE="$2"; PY="$3"; PARITY="$4"
source "$(dirname "$0")/lib.sh"
make_fixture "$FIXTURE"
MODEL="$PARITY/wan/pipeline"

job() {  # job NAME VRAM CHECKPOINTING [STEPS [LINEAR_ALPHA]]
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
      network: {type: lora, linear: 4, linear_alpha: ${5:-4}}
      save: {save_every: 2, dtype: float32, max_step_saves_to_keep: 3}
      datasets:
        - folder_path: $TMP/fixture/data
          resolution: [64]
          caption_dropout_rate: 0.05
      train: {steps: ${4:-8}, lr: 1e-3, batch_size: 2, gradient_checkpointing: $3,
              noise_scheduler: flowmatch, timestep_type: sigmoid, optimizer: adamw}
      model: {name_or_path: $MODEL, arch: wan21}
      sample: {sampler: flowmatch, width: 64, height: 64, sample_steps: 2, sample_every: 4,
               guidance_scale: 4, neg: "blurry", num_frames: 5, fps: 8,
               prompts: ['[trigger] dog']}
      oom: {vram_limit: $2, probe: false}
YAML
}
job whole 1GiB true >"$TMP/whole.yaml"
job split 1GiB true >"$TMP/split.yaml"
if "$LOOM" train "$TMP/whole.yaml" >"$TMP/whole.log" 2>&1; then ok "uninterrupted Wan run"
else bad "uninterrupted Wan run"; tail "$TMP/whole.log"; finish; exit; fi
previews=$(ls "$TMP/runs/whole/samples"/*_0.png 2>/dev/null | wc -l)
clips=$(ls "$TMP/runs/whole/samples"/*_0.webp 2>/dev/null | wc -l)
if [ "$previews" -eq 3 ] && [ "$clips" -eq 3 ]; then ok "previews at steps 0, 4 and 8 (PNG and animated WebP)"
else bad "previews at steps 0, 4 and 8 (found $previews PNG, $clips WebP)"; ls "$TMP/runs/whole/samples"; fi
if "$PY" - "$TMP"/runs/whole/samples/*_0.webp <<'PY'
import sys
from PIL import Image
for path in sys.argv[1:]:
    im = Image.open(path)
    assert getattr(im, "n_frames", 1) == 5, f"{path}: {getattr(im, 'n_frames', 1)} frames"
    assert im.size == (64, 64), f"{path}: {im.size}"
PY
then ok "each animated preview has the 5 frames asked for"; else bad "each animated preview has the 5 frames asked for"; fi

kill_and_resume "$LOOM" "$PY" 3 4  # killed after a step in 3..6

if "$PY" "$(dirname "$0")/../parity/check_trained_lora.py" "$MODEL" \
    "$TMP/runs/whole/whole.safetensors"; then ok "diffusers' WanPipeline loads the trained LoRA"
else bad "diffusers' WanPipeline loads the trained LoRA"; fi

# 1090 KiB holds the tiny model (1.03 MiB) but neither a 5-frame preview nor a step at batch 2
# without checkpointing: the rungs act one by one on real allocations, none injected, previews
# first losing frames, the steps in the ladder's video order.
job tight 1090KiB false >"$TMP/tight.yaml"
if "$LOOM" train "$TMP/tight.yaml" >"$TMP/tight.log" 2>&1; then ok "the tight-budget Wan run ends"
else bad "the tight-budget Wan run ends"; tail "$TMP/tight.log"; fi
if "$PY" - "$TMP/runs/tight/events.jsonl" "$TMP/runs/tight/metrics.jsonl" <<'PY'
import json, sys
events = [json.loads(line) for line in open(sys.argv[1])]
metrics = [json.loads(line) for line in open(sys.argv[2])]
rules = [e["rule"] for e in events if e["event"] == "change"]
ooms = [e for e in events if e["event"] == "oom"]
print("rules:", rules)
steps = [r for r in rules if r.startswith("train.")]
want = ["train.batch_1_accumulate", "train.gradient_checkpointing"]
sampling = [r for r in rules if r.startswith("sample.")]
# The documented sampling order: smaller previews first, then fewer frames, then none.
assert "sample.fewer_frames" in sampling, f"the preview frames were never cut: {sampling}"
assert sampling.index("sample.halve_size") < sampling.index("sample.fewer_frames") < \
    sampling.index("sample.disable"), f"sampling rungs out of order: {sampling}"
frames = [c for e in events if e["event"] == "change" for c in e["changes"]
          if c["knob"] == "sample.num_frames"]
assert frames and frames[0]["from"] == "5" and frames[0]["to"] == "1", f"frames changes {frames}"
assert ooms and all(e["kind"] == "device" for e in ooms), "no real out-of-memory errors"
assert steps[:2] == want, f"the step rungs began {steps[:2]}, not {want}"
trained = [m["step"] for m in metrics]
assert trained == list(range(1, 9)), f"steps trained {trained}, not each of 1..8 once"
PY
[ $? -eq 0 ] && grep -q ", 0 steps lost" "$TMP/tight.log"
then ok "the ladder's rungs in order under a real budget, zero steps lost"
else bad "the ladder's rungs in order under a real budget, zero steps lost"; fi

if "$LOOM" sample --model "$MODEL" --lora "$TMP/runs/whole/whole.safetensors" \
    --prompt "sks dog" --neg "blurry" --width 64 --height 64 --steps 2 --out "$TMP/out" \
    >"$TMP/sample.log" 2>&1 && ls "$TMP/out"/*.png >/dev/null 2>&1
then ok "loom sample with the trained Wan LoRA"; else bad "loom sample with the trained Wan LoRA"; cat "$TMP/sample.log"; fi

# The layout loom wrote for Wan 2.1 before issue 63 (diffusers' names under transformer.), made
# from the trained file by diffusers' own converter: loom sample reads it to the same image.
"$PY" - "$TMP/runs/whole/whole.safetensors" "$TMP/old.safetensors" <<'PY'
import sys
from diffusers.loaders.lora_conversion_utils import _convert_non_diffusers_wan_lora_to_diffusers
from safetensors.torch import load_file, save_file
converted = _convert_non_diffusers_wan_lora_to_diffusers(load_file(sys.argv[1]))
assert converted and all(k.startswith("transformer.blocks.") for k in converted), list(converted)[:3]
save_file({k: v.contiguous() for k, v in converted.items()}, sys.argv[2])
PY
if "$LOOM" sample --model "$MODEL" --lora "$TMP/old.safetensors" --prompt "sks dog" \
    --neg "blurry" --width 64 --height 64 --steps 2 --out "$TMP/out_old" >"$TMP/old.log" 2>&1 &&
   cmp -s "$(ls "$TMP/out"/*.png | head -n1)" "$(ls "$TMP/out_old"/*.png | head -n1)"
then ok "a Wan 2.1 LoRA in the earlier transformer. layout samples to the same image"
else bad "a Wan 2.1 LoRA in the earlier transformer. layout samples to the same image"; cat "$TMP/old.log"; fi

# ai-toolkit trains a transformer's LoRA at alpha = rank whatever linear_alpha says: the same job
# at linear_alpha 1 and 4 (rank 4) trains the same LoRA, and the job is told once.
job alpha1 1GiB true 2 1 >"$TMP/alpha1.yaml"
job alpha4 1GiB true 2 4 >"$TMP/alpha4.yaml"
"$LOOM" config check "$TMP/alpha1.yaml" >/dev/null 2>"$TMP/alpha1.check"
if grep -q "network.linear_alpha 1 does not apply to Wan: ai-toolkit trains transformer LoRAs in the PEFT format at alpha = rank (4)" "$TMP/alpha1.check" &&
   [ "$(grep -c "linear_alpha" "$TMP/alpha1.check")" -eq 1 ]
then ok "config check says once that linear_alpha is overridden"
else bad "config check says once that linear_alpha is overridden"; cat "$TMP/alpha1.check"; fi
sed -i 's/name: alpha1/name: alpha4b/' "$TMP/alpha1.yaml"
if "$LOOM" train "$TMP/alpha1.yaml" >"$TMP/alpha1.log" 2>&1 &&
   "$LOOM" train "$TMP/alpha4.yaml" >"$TMP/alpha4.log" 2>&1 &&
   "$PY" "$LORA_DIFFERENCE" "$TMP/runs/alpha4b/alpha4b.safetensors" \
     "$TMP/runs/alpha4/alpha4.safetensors" --max 0
then ok "linear_alpha 1 and 4 train identical LoRAs (alpha = rank, as ai-toolkit)"
else bad "linear_alpha 1 and 4 train identical LoRAs (alpha = rank, as ai-toolkit)"; tail -3 "$TMP/alpha1.log"; fi
# A checkpoint saved before loom recorded its alpha was trained at the job's linear_alpha: the
# run goes on at that scale, and says so.
"$PY" - "$TMP"/runs/alpha4b/state/*/trainer.json <<'PY'
import json, sys
for path in sys.argv[1:]:
    meta = json.load(open(path))
    meta.pop("linear_alpha")
    json.dump(meta, open(path, "w"))
PY
if "$LOOM" train "$TMP/alpha1.yaml" --set config.process.0.train.steps=4 >"$TMP/alpha_old.log" 2>&1 &&
   grep -q "resuming" "$TMP/alpha_old.log" &&
   grep -q "was trained at linear_alpha 1 (a LoRA scale of 0.25), where the job now trains at 4; the run resumes at 1" "$TMP/alpha_old.log"
then ok "a checkpoint from before alpha = rank resumes at its own alpha, said"
else bad "a checkpoint from before alpha = rank resumes at its own alpha, said"; tail -5 "$TMP/alpha_old.log"; fi
"$LOOM" sample --model "$MODEL" --prompt "a dog" --sampler euler --out "$TMP/o2" \
  >"$TMP/sampler.log" 2>&1
code=$?
if [ "$code" -ne 0 ] && grep -q -- "--sampler does not apply to Wan" "$TMP/sampler.log"
then ok "loom sample --sampler is refused for Wan (exit $code)"; else bad "loom sample --sampler is refused for Wan"; cat "$TMP/sampler.log"; fi
finish
