#!/usr/bin/env bash
# The README's quickstart figures come from the build they describe (issue 63): README command 1's
# job (configs/quickstart.yaml, all 400 steps, on sim) and its concept score
# (tools/base_model/concept_score.py) are run here, and the README's recovery lines and its
# concept-score table must be what this build prints. Both are deterministic for a build: sim
# gives the same allocations at any thread count, and the samplers are seeded.
#   test_quickstart_figures.sh LOOM SOURCE_DIR PYTHON
LOOM="$1"; SRC="$2"; PY="$3"
source "$(dirname "$0")/lib.sh"
cd "$SRC" || exit 1
RUN="$TMP/runs/quickstart_star"

if "$LOOM" train configs/quickstart.yaml --no-supervise --fresh \
     --set "config.process.0.training_folder=$TMP/runs" >"$TMP/train.out" 2>"$TMP/train.err"
then ok "the quickstart job trains"; else bad "the quickstart job trains"; tail -20 "$TMP/train.err"; finish; exit; fi
if "$PY" tools/base_model/concept_score.py "$LOOM" datasets/loom-tiny-sd \
     "$RUN/quickstart_star.safetensors" 32 "$TMP/score" >"$TMP/score.out" 2>&1
then ok "the concept score is measured"; else bad "the concept score is measured"; tail "$TMP/score.out"; finish; exit; fi

"$PY" - README.md "$TMP/train.err" "$TMP/score.out" <<'PY'
import re, sys
readme, train, score = (open(p, encoding="utf-8").read() for p in sys.argv[1:4])
failed = 0

def check(ok, what, detail=""):
    global failed
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else ": " + detail))
    failed += not ok

# The recovery lines: the README's code block shows the run's first warnings, as printed.
block = readme.split("```\n[warning]", 1)[1].split("\n...\n", 1)[0]
shown = ["[warning]" + block.split("\n", 1)[0]] + block.split("\n")[1:]
printed = [line for line in train.splitlines() if line.startswith("[warning]")][:len(shown)]
check(shown == printed, "the README's recovery lines are this build's",
      "\n".join(f"  README: {a}\n  run:    {b}" for a, b in zip(shown, printed) if a != b))

# The concept-score table against concept_score.py's own lines ("zxq  base + LoRA  0.97").
measured = {(w, m.strip()): v for w, m, v in
            re.findall(r"^(zxq|circle)\s+(base(?: \+ LoRA)?)\s+([0-9.]+)$", score, re.M)}
table = {(w, m): v for w, m, v in
         re.findall(r"^\| `(zxq|circle)` \([a-z ]+\) \| (base(?: \+ LoRA)?) \| \**([0-9.]+)\** \|$",
                    readme, re.M)}
check(len(measured) == 4 and table == measured, "the README's concept scores are this build's",
      f"README {table}, measured {measured}")
sys.exit(1 if failed else 0)
PY
[ $? -eq 0 ] && ok "README figures" || bad "README figures"
finish
