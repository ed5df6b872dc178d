#!/usr/bin/env bash
# The quickstart job (configs/quickstart.yaml on the bundled base model, issue 9), shortened to a
# few steps: its memory budget must still make the first preview and the first training step run
# out of memory, loom must recover from both with the documented rungs and lose no step, and the
# end of the run must say where the LoRA, the samples, the events and the stable plan are.
#   test_quickstart.sh LOOM SOURCE_DIR
LOOM="$1"; SRC="$2"
source "$(dirname "$0")/lib.sh"
cd "$SRC" || exit 1
STEPS=6
RUN="$TMP/runs/quickstart_star"

"$LOOM" config check configs/quickstart.yaml >/dev/null 2>&1 && ok "config check" || bad "config check"

"$LOOM" train configs/quickstart.yaml --no-supervise \
  --set "config.process.0.training_folder=$TMP/runs" --set "config.process.0.train.steps=$STEPS" \
  >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" -eq 0 ] && ok "train exits 0" || { bad "train exits $rc"; tail -20 "$TMP/err"; }

events="$RUN/events.jsonl"
has() { grep -q "$1" "$events" 2>/dev/null; }
has '"event":"oom".*"phase":"first_sample"' && ok "the first preview runs out of memory" ||
  bad "no first_sample OOM (the budget no longer makes the first preview fail)"
has '"event":"change".*"knob":"sample.batch_prompts"' && ok "sampling goes one prompt at a time" ||
  bad "no sample.one_prompt_at_a_time change"
has '"event":"oom".*"phase":"train_step".*"step":1[,}]' && ok "training step 1 runs out of memory" ||
  bad "no train_step OOM at step 1 (the budget no longer makes step 1 fail)"
has '"event":"change".*"rule":"free.encoders_off_device"' && ok "the idle encoders leave the device first" ||
  bad "no free.encoders_off_device change (the free rung comes before checkpointing)"
has '"event":"change".*"rule":"train.gradient_checkpointing"' && ok "gradient checkpointing is turned on" ||
  bad "no train.gradient_checkpointing change"
grep -q 'class="marker oom"' "$RUN/report.html" 2>/dev/null && ok "report.html shows the OOMs" ||
  bad "no report.html with OOM markers in the run folder"

trained=$(grep -o '"step":[0-9]*' "$RUN/metrics.jsonl" 2>/dev/null | sort -u | wc -l)
[ "$trained" -eq "$STEPS" ] && ok "$STEPS of $STEPS steps trained" || bad "$trained of $STEPS steps trained"
ls "$RUN"/samples/*_grid.png >/dev/null 2>&1 && ok "preview grids written" || bad "no preview grid"

for what in "LoRA:" "samples:" "events:" "report:" "stable:"; do
  grep -q "^$what" "$TMP/out" && ok "the end names $what" || bad "the end does not name $what"
done
grep -q "^LoRA: .*quickstart_star.safetensors" "$TMP/out" && [ -f "$RUN/quickstart_star.safetensors" ] &&
  ok "the LoRA file exists" || bad "no LoRA file"
finish
