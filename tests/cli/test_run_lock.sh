#!/usr/bin/env bash
# One trainer per run folder (train/run_lock.h) through the `loom` executable: a second trainer
# on a folder in use stops at once with exit 6 and names the owner; the read-only commands still
# work; the lock is free after the owner is killed with SIGKILL; --wait waits for the owner and
# then trains; the supervisor's child trains under its parent's ownership, and keeps it until it
# has checkpointed when the parent is killed.
#   test_run_lock.sh LOOM MAKE_TINY_FIXTURE
set -u
LOOM="$1"; FIXTURE="$2"
source "$(dirname "$0")/lib.sh"
make_fixture "$FIXTURE"

gone() {  # gone PID: waits up to 20 s for PID to exit
  for _ in $(seq 400); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.05; done
  return 1
}

tiny_job busy 100000 5 >"$TMP/busy.yaml"

# An unsupervised owner; a second trainer, supervised or not, is refused at once.
"$LOOM" train "$TMP/busy.yaml" --no-supervise >"$TMP/owner.log" 2>&1 &
owner=$!
wait_steps busy 2 "$owner" && ok "owner trains" || bad "owner did not start"
# Refused at once: it ends while the owner still trains, before it started a run of its own (no
# second `start` event; `timeout` only catches a hang).
starts() { grep -c '"event":"start"' "$TMP/runs/busy/events.jsonl"; }
before=$(starts)
timeout 300 "$LOOM" train "$TMP/busy.yaml" >"$TMP/second.out" 2>"$TMP/second.err"
rc=$?
[ "$rc" -eq 6 ] && ok "second trainer exits 6" || bad "second trainer exit code $rc (want 6)"
kill -0 "$owner" 2>/dev/null && [ "$(starts)" -eq "$before" ] && ok "refused while the owner trains" \
  || bad "refused while the owner trains"
grep -q "error: run folder $TMP/runs/busy is in use by another loom train (PID $owner on host $(hostname), started 20" \
  "$TMP/second.err" && ok "message names the owner's PID, host and start" \
  || { bad "busy message"; cat "$TMP/second.err"; }
grep -q -- "--wait" "$TMP/second.err" && ok "message says what to do" || bad "no --wait hint"
"$LOOM" train "$TMP/busy.yaml" --no-supervise >/dev/null 2>"$TMP/third.err"
[ $? -eq 6 ] && ok "unsupervised second trainer exits 6" || bad "unsupervised second trainer"
grep -q "pid: $owner" "$TMP/runs/busy/loom.lock" && ok "loom.lock holds the owner" \
  || bad "loom.lock content: $(cat "$TMP/runs/busy/loom.lock")"
# Read-only commands never take the lock.
"$LOOM" doctor "$TMP/runs/busy/loom.log" >/dev/null 2>&1
[ $? -le 1 ] && ok "loom doctor reads a folder in use" || bad "loom doctor on a folder in use"
"$LOOM" stable list >/dev/null 2>&1 && ok "loom stable list while training" \
  || bad "loom stable list while training"

# SIGKILL of the owner leaves no stale lock: the next trainer takes the folder and resumes.
kill -9 "$owner"; wait "$owner" 2>/dev/null
"$LOOM" train "$TMP/busy.yaml" --no-supervise --stop-after 1 >"$TMP/after_kill.log" 2>&1
rc=$?
[ "$rc" -eq 0 ] && ok "folder free after SIGKILL of the owner" \
  || { bad "after SIGKILL: exit $rc"; tail -3 "$TMP/after_kill.log"; }

# --wait: a supervised owner; a waiting trainer starts when the owner stops, and resumes.
"$LOOM" train "$TMP/busy.yaml" >"$TMP/sup.log" 2>&1 &
parent=$!
# (metrics.jsonl already has the earlier runs' lines: wait for the lock and for new steps.)
for _ in $(seq 400); do grep -q "pid: $parent" "$TMP/runs/busy/loom.lock" && break; sleep 0.05; done
grep -q "pid: $parent" "$TMP/runs/busy/loom.lock" && ok "the supervisor owns the folder" \
  || bad "lock owner under the supervisor: $(cat "$TMP/runs/busy/loom.lock")"
before=$(wc -l <"$TMP/runs/busy/metrics.jsonl")
wait_steps busy $((before + 3)) "$parent" || bad "supervised owner did not train"
child=$(pgrep -P "$parent" | head -1)
[ -n "$child" ] && ok "the supervised child trains under its parent's lock" \
  || bad "no supervised child"
"$LOOM" train "$TMP/busy.yaml" --wait --no-supervise --stop-after 3 >"$TMP/waiter.log" 2>&1 &
waiter=$!
for _ in $(seq 1200); do grep -q "waiting for run folder" "$TMP/waiter.log" && break; sleep 0.05; done
grep -q "waiting for run folder $TMP/runs/busy: in use by PID $parent" "$TMP/waiter.log" \
  && ok "--wait says whom it waits for" || { bad "--wait message"; cat "$TMP/waiter.log"; }
kill -0 "$waiter" 2>/dev/null && kill -0 "$parent" 2>/dev/null \
  && ok "--wait waits while the folder is in use" \
  || { bad "--wait did not wait"; cat "$TMP/waiter.log"; }
# SIGKILL the supervisor: its child is told to stop (checkpoint, exit 130) and holds the lock
# until then; the waiter takes the folder after it and resumes from that checkpoint.
kill -9 "$parent"; wait "$parent" 2>/dev/null
gone "$child" && ok "the orphaned child stopped" || bad "the orphaned child runs on"
wait "$waiter"; rc=$?
[ "$rc" -eq 0 ] && ok "the waiter trained once the folder was free" \
  || { bad "waiter exit $rc"; tail -5 "$TMP/waiter.log"; }
grep -q "resuming $TMP/runs/busy from the checkpoint" "$TMP/waiter.log" \
  && ok "the waiter resumed the run" || bad "the waiter did not resume"

# A job without a network section (ai-toolkit's full fine-tune) trains a LoRA and says so.
tiny_job no_network 1 | grep -v "network:" >"$TMP/no_network.yaml"
"$LOOM" train "$TMP/no_network.yaml" --no-supervise >"$TMP/no_network.log" 2>&1
rc=$?
[ "$rc" -eq 0 ] && ok "a job without a network trains" || { bad "no network: exit $rc"; tail -3 "$TMP/no_network.log"; }
grep -q "config.process.0 has no network section: ai-toolkit would fine-tune the whole model" \
  "$TMP/no_network.log" && ok "it says ai-toolkit would fine-tune the whole model" \
  || { bad "no full fine-tune warning"; cat "$TMP/no_network.log"; }

finish
