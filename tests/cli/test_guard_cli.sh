#!/usr/bin/env bash
# The OOM guard through the `loom` executable: the exit codes of a dirty device (worker state,
# scenario E) and of a budget below the model's weights (does not fit, scenario F), and a run
# killed with SIGKILL after a downgrade that, rerun, starts from the downgraded plan with no
# repeated OOM (scenario H).
#   test_guard_cli.sh LOOM MAKE_TINY_FIXTURE
set -u
LOOM="$1"; FIXTURE="$2"
source "$(dirname "$0")/lib.sh"
make_fixture "$FIXTURE"


# E: a dirty device → exit 5 at once (no retry: no OOM, no plan change, not even a restart by the
# supervisor), the message says to use a fresh worker. `timeout` only catches a hang.
tiny_job dirty 4 >"$TMP/dirty.yaml"
LOOM_FAULTS=dirty timeout 300 "$LOOM" train "$TMP/dirty.yaml" >"$TMP/dirty.out" 2>"$TMP/dirty.err"
rc=$?
[ "$rc" -eq 5 ] && ok "dirty device exits 5" || bad "dirty device exit code $rc (want 5)"
grep -q "error: worker state:.*fresh worker" "$TMP/dirty.err" && ok "worker-state message" \
  || { bad "worker-state message"; cat "$TMP/dirty.err"; }
if python3 - "$TMP/runs/dirty/events.jsonl" <<'PY'
import json, sys
events = [json.loads(line)["event"] for line in open(sys.argv[1])]
assert events.count("worker_state") == 1, events
for kind in ("oom", "change", "probe", "restart"):
    assert kind not in events, (kind, events)
PY
then ok "worker state reported before any retry"; else bad "worker state reported before any retry"; fi

# F: a budget below what even low_vram 3 needs (the weights are 4.8 MiB; level 3 trains this job
# in 2 MiB, its block weights streaming from the host) → exit 4 with the smallest plan tried.
tiny_job tiny_budget 4 >"$TMP/tiny.yaml"
"$LOOM" train "$TMP/tiny.yaml" --vram 64KiB >"$TMP/tiny.out" 2>"$TMP/tiny.err"
rc=$?
[ "$rc" -eq 4 ] && ok "budget below the weights exits 4" || bad "does-not-fit exit code $rc"
grep -q "error: does not fit:.*smallest plan tried" "$TMP/tiny.err" && ok "does-not-fit message" \
  || { bad "does-not-fit message"; cat "$TMP/tiny.err"; }

# H: an injected OOM at step 1 downgrades the plan; SIGKILL mid-run; the rerun starts from the
# persisted plan, says so, and runs out of memory no more.
tiny_job killed 40 >"$TMP/killed.yaml"
# --no-supervise: the SIGKILL hits the trainer itself, not a supervisor that would stop its child
# cleanly (and still be writing the run folder when the rerun starts).
LOOM_FAULTS="oom:phase=train_step:step=1" "$LOOM" train "$TMP/killed.yaml" --no-supervise \
  >"$TMP/k1.log" 2>&1 &
pid=$!
wait_steps killed 5 "$pid"
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
grep -q '"event":"change"' "$TMP/runs/killed/events.jsonl" && ok "the first run downgraded" \
  || bad "no change event before the kill"
grep -q "gradient_checkpointing: true" "$TMP/runs/killed/plan.yaml" && ok "plan.yaml persisted" \
  || bad "plan.yaml was not persisted before the kill"
before=$(wc -l <"$TMP/runs/killed/events.jsonl")
"$LOOM" train "$TMP/killed.yaml" >"$TMP/k2.log" 2>&1
rc=$?
[ "$rc" -eq 0 ] && ok "the rerun finishes" || { bad "rerun exit code $rc"; tail "$TMP/k2.log"; }
grep -q "starting from the persisted plan" "$TMP/k2.log" && ok "the rerun says it uses the plan" \
  || bad "the rerun does not say it starts from the persisted plan"
if tail -n +"$((before + 1))" "$TMP/runs/killed/events.jsonl" | grep -q '"event":"oom"'; then
  bad "the rerun ran out of memory again"
else
  ok "no repeated OOM after the restart"
fi

finish
