#!/usr/bin/env bash
# End-to-end checks of the `loom` executable: exit codes, stdout/stderr split, messages.
#   test_cli.sh PATH_TO_LOOM
set -u
LOOM="$1"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0

# run NAME EXPECTED_EXIT -- command...: runs it, keeps stdout/stderr in $TMP/NAME.{out,err}
run() {
  local name="$1" expected="$2"
  shift 3
  "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
  local code=$?
  if [ "$code" -ne "$expected" ]; then
    echo "FAIL $name: exit $code, expected $expected"
    sed 's/^/  stderr: /' "$TMP/$name.err" | head -5
    failed=$((failed + 1))
    return 1
  fi
  passed=$((passed + 1))
}

# expect NAME STREAM TEXT: the stream (out|err) of run NAME contains TEXT (fixed string)
expect() {
  if grep -qF -- "$3" "$TMP/$1.$2"; then
    passed=$((passed + 1))
  else
    echo "FAIL $1: std$2 lacks: $3"
    sed "s/^/  std$2: /" "$TMP/$1.$2" | head -5
    failed=$((failed + 1))
  fi
}

cat >"$TMP/job.yaml" <<'YAML'
job: extension
config:
  name: cli_test
  process:
    - type: sd_trainer
      training_folder: out
      device: sim
      datasets:
        - folder_path: data
      model:
        name_or_path: models/tiny
      trian:
        lr: 1e-4
YAML

run version 0 -- "$LOOM" --version
expect version out "loom 0.1.0"

run help 0 -- "$LOOM" help
expect help out "config check"
expect help out "Exit codes:"

run help_command 0 -- "$LOOM" help config check
expect help_command out "--set PATH=VALUE"
expect help_command out "default: none"
expect help_command out "default: off"

run help_flag 0 -- "$LOOM" config check --help
expect help_flag out "loom config check [OPTION...] JOB.yaml"

run help_unknown 2 -- "$LOOM" help frobnicate
expect help_unknown err "no command named 'frobnicate'"

run no_args 2 -- "$LOOM"
expect no_args err "Usage: loom COMMAND"

run unknown_command 2 -- "$LOOM" config
expect unknown_command err "did you mean \`loom config check\`?"

run bad_flag 2 -- "$LOOM" config check --frobnicate "$TMP/job.yaml"
expect bad_flag err "see \`loom help config check\`"

run check_valid 0 -- "$LOOM" config check "$TMP/job.yaml"
expect check_valid out "name: cli_test"
expect check_valid out "lr: 1.0e-06"
expect check_valid err "warning: unknown key config.process.0.trian (did you mean 'train'?)"
expect check_valid err "valid job 'cli_test' (1 warning)"

# stdout is the resolved job alone: feeding it back must give the same text.
"$LOOM" config check "$TMP/job.yaml" 2>/dev/null >"$TMP/resolved.yaml"
"$LOOM" config check "$TMP/resolved.yaml" 2>/dev/null >"$TMP/resolved2.yaml"
if cmp -s "$TMP/resolved.yaml" "$TMP/resolved2.yaml"; then passed=$((passed + 1)); else
  echo "FAIL resolved output does not reproduce itself"; failed=$((failed + 1)); fi

run check_set 0 -- "$LOOM" config check "$TMP/job.yaml" --set config.process.0.train.lr=3e-4 \
  --set "config.process.0.datasets.0.resolution=[512, 768]"
expect check_set out "lr: 3.0e-04"
expect check_set out "resolution: [512, 768]"
expect check_set err "--set config.process.0.train.lr: (unset) -> 3e-4"

run check_strict 2 -- "$LOOM" config check --strict "$TMP/job.yaml"
expect check_strict err "unknown key config.process.0.trian"
expect check_strict err "[--strict]"

run check_invalid 2 -- "$LOOM" config check "$TMP/job.yaml" --set config.process.0.train.batch_size=0
expect check_invalid err "error: --set config.process.0.train.batch_size=0: config.process.0.train.batch_size must be >= 1, got 0"

run check_missing 3 -- "$LOOM" config check "$TMP/nope.yaml"
expect check_missing err "nope.yaml: no such job file"

run check_examples 0 -- "$LOOM" config check configs/sd15_lora.yaml configs/sdxl_lora.yaml configs/flux_lora_24gb.yaml
# ai-toolkit's Flux example quantizes (model.quantize: true), which loom does: nothing to warn.
if grep -q "quantize" "$TMP/check_examples.err"; then
  echo "FAIL check_examples: model.quantize is warned"; failed=$((failed + 1))
else passed=$((passed + 1)); fi

# A hub id is looked up in the local Hugging Face cache only: absent, one error names the folders
# searched and the download command (exit 3).
run hub_missing 3 -- env HF_HUB_CACHE="$TMP/hub" HOME="$TMP/home" "$LOOM" inspect black-forest-labs/FLUX.1-dev
expect hub_missing err "$TMP/hub/models--black-forest-labs--FLUX.1-dev"
expect hub_missing err "huggingface-cli download black-forest-labs/FLUX.1-dev"

run devices 0 -- "$LOOM" devices
expect devices out "cpu (host memory, no budget)"
expect devices out "give --vram SIZE"

run devices_sim 0 -- "$LOOM" devices --vram 96MiB
expect devices_sim out "sim (simulated accelerator, budget 96.00 MiB)"
expect devices_sim out "96.00 MiB    96.00 MiB"

run devices_dirty 0 -- "$LOOM" devices --vram 96MiB --faults dirty
expect devices_dirty out "96.00 MiB    0 bytes"

run devices_bad_vram 2 -- "$LOOM" devices --vram lots
expect devices_bad_vram err "loom devices: --vram: invalid size 'lots'"

run doctor_early 0 -- "$LOOM" doctor tests/doctor/logs/aitk_step2_oom_loop.log
expect doctor_early out "case:  early_steps"
expect doctor_early out "set \`train.gradient_checkpointing: true\`"
expect doctor_early out "32: # OOM during training step, skipping batch 1/3 #"

run doctor_loom 0 -- "$LOOM" doctor tests/doctor/logs/loom_console.log
expect doctor_loom out "case:  early_steps"
expect doctor_loom out "line 10: train.gradient_checkpointing false -> true"

run doctor_worker 0 -- "$LOOM" doctor tests/doctor/logs/aitk_zero_bytes_free.log
expect doctor_worker out "case:  worker_state"

run doctor_json 0 -- "$LOOM" doctor --json tests/doctor/logs/loom_events.jsonl
expect doctor_json out "\"case\": \"sampling_only\""

run doctor_no_oom 1 -- "$LOOM" doctor tests/doctor/logs/no_oom.log
expect doctor_no_oom out "case:  no_oom"

run doctor_missing 3 -- "$LOOM" doctor "$TMP/nope.log"
expect doctor_missing err "nope.log: no such log file"

run doctor_no_arg 2 -- "$LOOM" doctor
expect doctor_no_arg err "loom doctor: give the log file to read"

LOOM_FAULTS="oom:phase=nowhere" "$LOOM" --version >"$TMP/bad_faults.out" 2>"$TMP/bad_faults.err"
if [ $? -eq 2 ] && grep -qF "invalid fault rule 'oom:phase=nowhere': unknown phase 'nowhere'" "$TMP/bad_faults.err"; then
  passed=$((passed + 1)); else echo "FAIL bad LOOM_FAULTS is not a start-up error"; failed=$((failed + 1)); fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
