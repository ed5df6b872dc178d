#!/usr/bin/env bash
# The stable-config store through `loom` (issue 8): a job that downgrades in its first run starts
# its second run (same job, new name) from the stable plan with zero OOM events; two runs
# recording at once both land; a corrupted database is reported clearly while the run completes
# and the file is left as it was; `loom stable export` writes a job that `loom config check`
# accepts and that trains on the stable plan; `loom stable forget` removes a plan.
#   test_stable_store.sh LOOM MAKE_TINY_FIXTURE PYTHON
set -u
LOOM="$1"; FIXTURE="$2"; PYTHON="${3:-python3}"
source "$(dirname "$0")/lib.sh"
make_fixture "$FIXTURE"
STORE="$TMP/store/stable.db"

job() {  # job NAME STEPS BATCH CHECKPOINTING PROBE
  cat <<YAML
job: extension
config:
  name: $1
  process:
    - type: sd_trainer
      training_folder: $TMP/runs
      device: sim
      training_seed: 3
      network: {linear: 4, linear_alpha: 4}
      save: {save_every: 100, dtype: float32}
      datasets:
        - folder_path: $TMP/fixture/data
          resolution: [64]
      train: {steps: $2, lr: 1e-3, batch_size: $3, gradient_checkpointing: $4,
              disable_sampling: true}
      model: {name_or_path: $TMP/fixture/model, arch: sd1}
      oom: {vram_limit: 1GiB, probe: $5}
YAML
}

# The probe's peak of a one-step run (a store of its own, so calibration teaches nothing).
probe_peak() {  # probe_peak NAME BATCH CHECKPOINTING
  job "$1" 1 "$2" "$3" true >"$TMP/$1.yaml"
  "$LOOM" train "$TMP/$1.yaml" --no-supervise --store "$TMP/calibration.db" >/dev/null 2>&1 \
    || { echo "FAIL calibration run $1"; exit 1; }
  "$PYTHON" -c 'import json,sys
print(next(e["peak"] for e in map(json.loads, open(sys.argv[1])) if e["event"] == "probe" and e["part"] == "train"))' \
    "$TMP/runs/$1/events.jsonl"
}
full=$(probe_peak cal_full 2 false)
light=$(probe_peak cal_light 1 true)
[ "$full" -gt "$light" ] || { echo "FAIL calibration: batch 2 peak $full <= batch 1 peak $light"; exit 1; }
BUDGET="$(( (full + light) / 2 / 1024 ))KiB"
echo "budget $BUDGET (batch 2 peak $full, checkpointing + batch 1 peak $light)"

ooms() { grep -c '"event":"oom"' "$TMP/runs/$1/events.jsonl"; }

# First run: the budget makes step 1 run out of memory; the ladder downgrades; the plan that
# trained is recorded in the store.
job first 3 2 false false >"$TMP/job.yaml"
"$LOOM" train "$TMP/job.yaml" --vram "$BUDGET" --store "$STORE" >"$TMP/first.out" 2>"$TMP/first.err"
rc=$?
[ "$rc" -eq 0 ] && ok "first run completes" || { bad "first run exit $rc"; tail "$TMP/first.err"; }
[ "$(ooms first)" -ge 1 ] && ok "first run ran out of memory ($(ooms first) times)" \
  || bad "first run had no OOM: the budget does not bite"
id=$(sed -n 's/^stable: .*(#\([0-9]*\) in .*/\1/p' "$TMP/first.out")
[ -n "$id" ] && ok "first run's stable plan recorded as #$id" \
  || { bad "no store id in the summary"; cat "$TMP/first.out"; }
[ -f "$STORE" ] && ok "the store file exists at --store" || bad "no $STORE"

# Second run, same job under a new name: starts from the stable plan, zero OOM events.
"$LOOM" train "$TMP/job.yaml" --vram "$BUDGET" --store "$STORE" --set config.name=second \
  >"$TMP/second.out" 2>"$TMP/second.err"
rc=$?
[ "$rc" -eq 0 ] && ok "second run completes" || { bad "second run exit $rc"; tail "$TMP/second.err"; }
[ "$(ooms second)" -eq 0 ] && ok "second run: zero OOM events" \
  || bad "second run ran out of memory $(ooms second) times"
grep -q "starting from stable plan #$id" "$TMP/runs/second/loom.log" \
  && ok "second run says which stable plan it starts from" || bad "no reuse line in loom.log"
grep -q "train.gradient_checkpointing: false -> true" "$TMP/runs/second/loom.log" \
  && ok "the difference is logged knob by knob" || bad "no knob-by-knob difference in loom.log"
cmp -s "$TMP/runs/first/plan.yaml" "$TMP/runs/second/plan.yaml" \
  && ok "second run's plan is the first run's final plan" \
  || { bad "plans differ"; diff "$TMP/runs/first/plan.yaml" "$TMP/runs/second/plan.yaml"; }
grep -q '"event":"reuse"' "$TMP/runs/second/events.jsonl" && ok "reuse event" || bad "no reuse event"

# Two runs recording into the store at the same time: both land.
"$LOOM" train "$TMP/job.yaml" --vram "$BUDGET" --store "$STORE" --set config.name=concurrent_a \
  >"$TMP/ca.out" 2>&1 &
pa=$!
"$LOOM" train "$TMP/job.yaml" --vram "$BUDGET" --store "$STORE" --set config.name=concurrent_b \
  >"$TMP/cb.out" 2>&1 &
pb=$!
wait "$pa"; ra=$?
wait "$pb"; rb=$?
[ "$ra" -eq 0 ] && [ "$rb" -eq 0 ] && ok "concurrent runs complete" \
  || { bad "concurrent runs exit $ra/$rb"; tail "$TMP/ca.out" "$TMP/cb.out"; }
"$LOOM" stable list --store "$STORE" >"$TMP/list.out" 2>&1
for name in first second concurrent_a concurrent_b; do
  grep -q "$name" "$TMP/list.out" && ok "stable list shows $name" \
    || { bad "stable list lacks $name"; cat "$TMP/list.out"; }
done
grep -q "stable store" "$TMP/ca.out" "$TMP/cb.out" && bad "a concurrent run warned about the store" \
  || ok "no store warnings from concurrent runs"

# A corrupted database: a clear message, the run still completes, the file is untouched.
mkdir -p "$TMP/bad"
head -c 8192 /dev/urandom >"$TMP/bad/stable.db"
sum_before=$(md5sum <"$TMP/bad/stable.db")
"$LOOM" train "$TMP/job.yaml" --vram "$BUDGET" --store "$TMP/bad/stable.db" \
  --set config.name=with_corrupt_store >"$TMP/bad.out" 2>"$TMP/bad.err"
rc=$?
[ "$rc" -eq 0 ] && ok "a run with a corrupt store completes" || { bad "exit $rc"; tail "$TMP/bad.err"; }
grep -q "$TMP/bad/stable.db" "$TMP/bad.err" && ok "the message names the database file" \
  || { bad "no message naming the corrupt store"; cat "$TMP/bad.err"; }
[ -f "$TMP/runs/with_corrupt_store/stable.yaml" ] && ok "stable.yaml still written" \
  || bad "no stable.yaml with a corrupt store"
[ "$(md5sum <"$TMP/bad/stable.db")" = "$sum_before" ] && ok "the corrupt file is left as it was" \
  || bad "the corrupt store file was modified"
"$LOOM" stable list --store "$TMP/bad/stable.db" >/dev/null 2>"$TMP/badlist.err"
rc=$?
[ "$rc" -ne 0 ] && grep -q "stable.db" "$TMP/badlist.err" && ok "stable list on it fails clearly" \
  || { bad "stable list on a corrupt store: exit $rc"; cat "$TMP/badlist.err"; }

# Export: a complete job with the stable plan; config check accepts it; it trains on that plan
# (reuse off: the plan comes from the file, not the store) without running out of memory.
"$LOOM" stable show "$id" --store "$STORE" >"$TMP/show.out" 2>&1 && grep -q "first" "$TMP/show.out" \
  && ok "stable show $id" || { bad "stable show"; cat "$TMP/show.out"; }
"$LOOM" stable export "$id" -o "$TMP/exported.yaml" --name exported --store "$STORE" \
  >"$TMP/export.out" 2>&1 && ok "stable export" || { bad "stable export"; cat "$TMP/export.out"; }
"$LOOM" config check "$TMP/exported.yaml" >"$TMP/check.out" 2>&1 \
  && ok "config check accepts the export" || { bad "config check"; cat "$TMP/check.out"; }
grep -q "gradient_checkpointing: true" "$TMP/exported.yaml" && ok "the export sets checkpointing" \
  || bad "the export lacks the stable plan's checkpointing"
"$LOOM" train "$TMP/exported.yaml" --vram "$BUDGET" --store "$TMP/other.db" \
  --set config.process.0.oom.reuse_stable=off >"$TMP/exp.out" 2>"$TMP/exp.err"
rc=$?
[ "$rc" -eq 0 ] && ok "the exported job trains" || { bad "exported job exit $rc"; tail "$TMP/exp.err"; }
[ "$(ooms exported)" -eq 0 ] && ok "the exported job: zero OOM events" \
  || bad "the exported job ran out of memory $(ooms exported) times"
cmp -s "$TMP/runs/first/plan.yaml" "$TMP/runs/exported/plan.yaml" \
  && ok "the exported job starts from the stable plan" \
  || { bad "exported plan differs"; diff "$TMP/runs/first/plan.yaml" "$TMP/runs/exported/plan.yaml"; }

# The qtypes (issue 21): a job that quantizes in uint4 keeps it in plan.yaml, the store key, the
# export and the quantized-weight cache's name; a restart quantizes as plan.yaml says even when
# the job now says otherwise.
QSTORE="$TMP/qstore.db"
job quant 3 1 true false | sed 's|arch: sd1}|arch: sd1, quantize: true, qtype: uint4}|' \
  >"$TMP/quant.yaml"
"$LOOM" train "$TMP/quant.yaml" --store "$QSTORE" >"$TMP/quant.out" 2>"$TMP/quant.err" \
  && ok "a uint4 job trains" || { bad "uint4 job"; tail "$TMP/quant.err"; }
grep -q "^  qtype: uint4$" "$TMP/runs/quant/plan.yaml" && ok "plan.yaml carries qtype uint4" \
  || { bad "plan.yaml lacks the qtype"; cat "$TMP/runs/quant/plan.yaml"; }
# quantize_te follows quantize (as in ai-toolkit), in qtype_te's default, qfloat8.
ls "$TMP/runs/quant/cache/quantized/" 2>/dev/null | grep -q -- "-uint4-te-qfloat8.safetensors$" \
  && ok "the codes are cached under the qtypes' name" || bad "no uint4 codes in the cache"
qid=$(sed -n 's/^stable: .*(#\([0-9]*\) in .*/\1/p' "$TMP/quant.out")
"$LOOM" stable list --store "$QSTORE" >"$TMP/qlist.out" 2>&1
grep -q "uint4" "$TMP/qlist.out" && ok "stable list shows the key's qtype" \
  || { bad "stable list lacks uint4"; cat "$TMP/qlist.out"; }
"$LOOM" stable export "$qid" -o "$TMP/qexport.yaml" --store "$QSTORE" >/dev/null 2>&1 \
  && grep -q "qtype: uint4" "$TMP/qexport.yaml" && grep -q "quantize: true" "$TMP/qexport.yaml" \
  && ok "the export quantizes in uint4" || { bad "export lacks the qtype"; cat "$TMP/qexport.yaml"; }
"$LOOM" train "$TMP/quant.yaml" --store "$QSTORE" --set config.name=quant_q8 \
  --set config.process.0.model.qtype=qint8 >/dev/null 2>&1
grep -q "starting from stable plan" "$TMP/runs/quant_q8/loom.log" \
  && bad "a qint8 job started from the uint4 job's stable plan" \
  || ok "a qint8 job does not take the uint4 job's plan (another key)"
job quant_restart 3 1 true false | sed 's|arch: sd1}|arch: sd1, quantize: true, qtype: uint4}|' \
  >"$TMP/quant_restart.yaml"
"$LOOM" train "$TMP/quant_restart.yaml" --no-supervise --stop-after 1 --store "$QSTORE" \
  >/dev/null 2>&1
"$LOOM" train "$TMP/quant_restart.yaml" --no-supervise --store "$QSTORE" \
  --set config.process.0.model.qtype=qint8 >/dev/null 2>"$TMP/qrestart.err" \
  && ok "the uint4 run resumes" || { bad "resume"; tail "$TMP/qrestart.err"; }
grep -q "model.qtype: the job says qint8, the plan says uint4" "$TMP/runs/quant_restart/loom.log" \
  && ok "the restart keeps plan.yaml's qtype and says so" \
  || { bad "no qtype line on restart"; grep -i "plan" "$TMP/runs/quant_restart/loom.log" | head; }
ls "$TMP/runs/quant_restart/cache/quantized/" | grep -q qint8 \
  && bad "the restart quantized in qint8" || ok "the restart quantized in uint4 again (no qint8 codes)"

# Forget: the plan is gone from show and list.
"$LOOM" stable forget "$id" --store "$STORE" >/dev/null 2>&1 && ok "stable forget $id" \
  || bad "stable forget"
"$LOOM" stable show "$id" --store "$STORE" >/dev/null 2>&1 && bad "show still finds #$id" \
  || ok "a forgotten plan is gone"

finish
