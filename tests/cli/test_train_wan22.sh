#!/usr/bin/env bash
# `loom train` on ai-toolkit's Wan 2.2 14B example job (train_lora_wan22_14b_24gb.yaml's keys:
# arch wan22_14b, quantize with qtype "uint4|<adapter>", qfloat8 text encoder, low_vram, cached
# text embeddings, switch_boundary_every, both experts trained) pointed at the tiny two-expert
# WanPipeline of wan_reference.py, on the simulated device: the adapter part of the qtype is said
# to be unsupported and uint4 used; the LoRA is a pair of files in ai-toolkit's layout
# (<name>_high_noise / _low_noise.safetensors, step files too), each with trained weights, which
# diffusers' Wan 2.2 pipeline loads (the low-noise one with load_into_transformer_2) with every key
# used; killed with SIGKILL mid-run and rerun, it resumes and ends on the pair of an uninterrupted
# run; train_low_noise: false gives the high-noise file alone; `loom sample --lora` applies the
# pair through both experts.
#   test_train_wan22.sh LOOM MAKE_TINY_FIXTURE PYTHON PARITY_DIR
set -u
LOOM="$1"; FIXTURE="$2"; PY="$3"; PARITY="$4"
source "$(dirname "$0")/lib.sh"
make_fixture "$FIXTURE"
MODEL="$PARITY/wan22/pipeline"
CHECK="$(dirname "$0")/../parity/check_trained_wan22_lora.py"

job() {  # job NAME TRAIN_LOW_NOISE
  job_at "$1" "$2" 1GiB true true 1
}

job_at() {  # job_at NAME TRAIN_LOW_NOISE VRAM LOW_VRAM_AND_QUANTIZE CHECKPOINTING BATCH
  cat <<YAML
job: extension
config:
  name: $1
  process:
    - type: sd_trainer
      training_folder: $TMP/runs
      device: sim
      training_seed: 5
      network: {type: lora, linear: 4, linear_alpha: 4}
      save: {dtype: float32, save_every: 2, max_step_saves_to_keep: 4}
      datasets:
        - folder_path: $TMP/fixture/data
          caption_ext: txt
          caption_dropout_rate: 0.05
          num_frames: 1
          resolution: [64]
      train:
        batch_size: $6
        steps: 8
        gradient_accumulation: 1
        train_unet: true
        train_text_encoder: false
        gradient_checkpointing: $5
        noise_scheduler: flowmatch
        timestep_type: linear
        optimizer: adamw8bit
        lr: 1e-3
        optimizer_params: {weight_decay: 1e-4}
        dtype: fp32
        switch_boundary_every: 2
        cache_text_embeddings: true
      model:
        name_or_path: $MODEL
        arch: wan22_14b
        quantize: $4
        qtype: "uint4|ostris/accuracy_recovery_adapters/wan22_14b_t2i_torchao_uint4.safetensors"
        quantize_te: true
        qtype_te: qfloat8
        low_vram: $4
        model_kwargs: {train_high_noise: true, train_low_noise: $2}
      sample:
        sampler: flowmatch
        sample_every: 4
        width: 64
        height: 64
        num_frames: 1
        fps: 16
        prompts: ["a sks dog"]
        neg: ""
        seed: 42
        guidance_scale: 3.5
        sample_steps: 2
      oom: {vram_limit: $3, probe: false}
meta: {name: "[name]", version: "1.0"}
YAML
}
job whole true >"$TMP/whole.yaml"
job split true >"$TMP/split.yaml"
job high false >"$TMP/high.yaml"
if "$LOOM" train "$TMP/whole.yaml" >"$TMP/whole.log" 2>&1; then ok "the Wan 2.2 example job trains"
else bad "the Wan 2.2 example job trains"; tail -20 "$TMP/whole.log"; finish; exit; fi
if grep -q "accuracy-recovery adapter after '|' is not supported yet; loom quantizes with uint4" "$TMP/whole.log"
then ok "the qtype's adapter is said to be unsupported, uint4 used"
else bad "the qtype's adapter is said to be unsupported, uint4 used"; grep -i qtype "$TMP/whole.log"; fi
R="$TMP/runs/whole"
if [ -f "$R/whole_high_noise.safetensors" ] && [ -f "$R/whole_low_noise.safetensors" ] &&
   [ ! -f "$R/whole.safetensors" ] && [ -f "$R/whole_000000004_high_noise.safetensors" ] &&
   [ -f "$R/whole_000000004_low_noise.safetensors" ]
then ok "the LoRA is a pair of files, step saves too"
else bad "the LoRA is a pair of files, step saves too"; ls "$R"; fi
if "$PY" - "$R/whole_high_noise.safetensors" "$R/whole_low_noise.safetensors" <<'PY'
import sys
from safetensors.torch import load_file
for path in sys.argv[1:]:
    t = load_file(path)
    assert all(k.startswith("diffusion_model.blocks.") for k in t), f"{path}: {list(t)[:3]}"
    assert any(".self_attn.q.lora_A" in k for k in t), f"{path}: not the original Wan names"
    moved = max(v.abs().max().item() for k, v in t.items() if "lora_B" in k)
    assert moved > 0, f"{path}: its expert never trained (lora_B is zero)"
PY
then ok "each file in ai-toolkit's layout, each expert trained"
else bad "each file in ai-toolkit's layout, each expert trained"; fi
if "$PY" "$CHECK" "$MODEL" "$R/whole_high_noise.safetensors" "$R/whole_low_noise.safetensors"
then ok "diffusers' Wan 2.2 pipeline loads the pair with every key used"
else bad "diffusers' Wan 2.2 pipeline loads the pair with every key used"; fi

# SIGKILL after a step in 3..5, then the rerun: the same pair as the uninterrupted run.
# The fault kills it where step 6 begins should it outpace the polling (as kill_and_resume does).
kill_at=$(( 3 + RANDOM % 3 ))
LOOM_FAULTS="kill:phase=train_step:step=6" \
  "$LOOM" train "$TMP/split.yaml" --no-supervise >"$TMP/split1.log" 2>&1 &
pid=$!
wait_steps split "$kill_at" "$pid"
kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
if "$LOOM" train "$TMP/split.yaml" >"$TMP/split2.log" 2>&1 && grep -q "resuming" "$TMP/split2.log"
then ok "the rerun resumes (killed after step $kill_at)"; else bad "the rerun resumes"; tail "$TMP/split2.log"; fi
same=0
for e in high_noise low_noise; do
  "$PY" "$LORA_DIFFERENCE" "$R/whole_$e.safetensors" "$TMP/runs/split/split_$e.safetensors" || same=1
done
if [ "$same" -eq 0 ]; then ok "the resumed pair equals the uninterrupted one"
else bad "the resumed pair equals the uninterrupted one"; fi

if "$LOOM" train "$TMP/high.yaml" >"$TMP/high.log" 2>&1 &&
   [ -f "$TMP/runs/high/high_high_noise.safetensors" ] && [ ! -f "$TMP/runs/high/high_low_noise.safetensors" ] &&
   "$PY" "$CHECK" "$MODEL" "$TMP/runs/high/high_high_noise.safetensors" - >/dev/null
then ok "train_low_noise: false trains the high-noise expert alone, one file"
else bad "train_low_noise: false trains the high-noise expert alone, one file"; ls "$TMP/runs/high"; tail "$TMP/high.log"; fi

# 1260 KiB holds the two experts (1.11 MiB) but not the example's previews or a step at batch 2
# without checkpointing or low_vram: the rungs act on real allocations, none injected — the idle
# expert to the host first (free), sampling, then batch 1, checkpointing, the bucket, and low_vram up to streaming with the job's
# uint4 base and qfloat8 text encoder — with each of the 8 steps trained once.
job_at tight true 1260KiB false false 2 >"$TMP/tight.yaml"
if "$LOOM" train "$TMP/tight.yaml" >"$TMP/tight.log" 2>&1; then ok "the tight-budget Wan 2.2 run ends"
else bad "the tight-budget Wan 2.2 run ends"; tail "$TMP/tight.log"; fi
if "$PY" - "$TMP/runs/tight/events.jsonl" "$TMP/runs/tight/metrics.jsonl" "$TMP/runs/tight/plan.yaml" <<'PY'
import json, sys
events = [json.loads(line) for line in open(sys.argv[1])]
metrics = [json.loads(line) for line in open(sys.argv[2])]
rules = [e["rule"] for e in events if e["event"] == "change"]
print("rules:", rules)
ooms = [e for e in events if e["event"] == "oom"]
assert ooms and all(e["kind"] == "device" for e in ooms), "no real out-of-memory errors"
# The free rung first: a step computes with one expert, so the other leaves the device.
step_rules = [r for r in rules if not r.startswith("sample.")]
assert step_rules and step_rules[0] == "free.idle_expert_to_host", rules
steps = [r for r in rules if r.startswith("train.")]
assert steps[:2] == ["train.batch_1_accumulate", "train.gradient_checkpointing"], steps
assert steps.count("train.low_vram") == 3, f"low_vram did not reach streaming: {steps}"
assert "sample.disable" in rules, rules
trained = [m["step"] for m in metrics]
assert trained == list(range(1, 9)), f"steps trained {trained}, not each of 1..8 once"
plan = open(sys.argv[3]).read()
assert "qtype: uint4" in plan and "qtype_te: qfloat8" in plan, plan
PY
[ $? -eq 0 ] && grep -q ", 0 steps lost" "$TMP/tight.log"
then ok "the ladder's rungs in order under a real budget, zero steps lost, uint4 base"
else bad "the ladder's rungs in order under a real budget, zero steps lost, uint4 base"; fi

if "$LOOM" sample --model "$MODEL" --lora "$R/whole_low_noise.safetensors" \
    --prompt "sks dog" --width 64 --height 64 --steps 2 --out "$TMP/out" \
    >"$TMP/sample.log" 2>&1 && ls "$TMP/out"/*.png >/dev/null 2>&1
then ok "loom sample with the trained pair"; else bad "loom sample with the trained pair"; cat "$TMP/sample.log"; fi

# A folder as Wan 2.2 ships: UniPC as its scheduler, and (some exports) no boundary_ratio. loom
# samples with flow-matching Euler and routes at ai-toolkit's boundary, and says both.
cp -r "$MODEL" "$TMP/released"
"$PY" - "$TMP/released" <<'PY'
import json, os, sys
root = sys.argv[1]
path = os.path.join(root, "scheduler", "scheduler_config.json")
config = json.load(open(path))
config["_class_name"] = "UniPCMultistepScheduler"
json.dump(config, open(path, "w"))
index = json.load(open(os.path.join(root, "model_index.json")))
index.pop("boundary_ratio", None)
json.dump(index, open(os.path.join(root, "model_index.json"), "w"))
PY
if "$LOOM" sample --model "$TMP/released" --prompt "sks dog" --width 64 --height 64 --steps 2 \
    --out "$TMP/out_released" >"$TMP/released.log" 2>&1 &&
   grep -q "the folder's scheduler is UniPCMultistepScheduler; loom's previews and \`loom sample\` denoise with the flow-matching Euler sampler at shift 3 instead" "$TMP/released.log" &&
   grep -q "has no boundary_ratio: the high-noise expert denoises timesteps from 875 of 1000 up" "$TMP/released.log"
then ok "a released folder's UniPC scheduler and missing boundary_ratio are said"
else bad "a released folder's UniPC scheduler and missing boundary_ratio are said"; cat "$TMP/released.log"; fi
finish
