#!/usr/bin/env bash
# The run report in a real browser (issue 24). A short run with out-of-memory errors in two phases
# and preview samples writes report.html at its checkpoints and at the end; headless Chromium
# (Debian's chromium-headless-shell, installed by scripts/setup.sh) opens it from disk, logs no
# console message (a script error, a missing file) and its screenshot shows the plots — the loss
# line, the memory lines, the OOM markers, the throughput line — by their colors. A run killed
# after two checkpoints left a report behind, and a run that does not fit writes one with the
# error.
#   test_report_browser.sh LOOM MAKE_TINY_FIXTURE PYTHON
set -u
LOOM="$1"; FIXTURE="$2"; PYTHON="$3"
source "$(dirname "$0")/../cli/lib.sh"
CHECK="$(dirname "$0")/check_screenshot.py"
CHROME="$(command -v chromium-headless-shell || command -v chromium || true)"
if [ -z "$CHROME" ]; then
  echo "FAIL no headless Chromium on PATH: scripts/setup.sh installs chromium-headless-shell"
  exit 1
fi
make_fixture "$FIXTURE"

# browse HTML PNG: a screenshot; the console's lines go to PNG.console.
browse() {
  # A profile of its own: nothing shared with another Chromium on the machine.
  "$CHROME" --headless --no-sandbox --disable-gpu --hide-scrollbars --enable-logging=stderr \
    --v=0 --user-data-dir="$TMP/chrome-profile" --window-size=1040,2600 --screenshot="$2" \
    "file://$1" 2>"$2.log" >/dev/null || { echo "Chromium failed:"; tail -5 "$2.log"; }
  grep "CONSOLE" "$2.log" >"$2.console" || true
}

# A run with sampling: OOMs in the first sample and at step 3 (twice), previews every 4 steps.
tiny_job report 8 2 | sed -e 's/disable_sampling: true/disable_sampling: false/' >"$TMP/report.yaml"
cat >>"$TMP/report.yaml" <<YAML
      sample: {sampler: ddim, width: 64, height: 64, sample_steps: 2, sample_every: 4,
               prompts: ['a star', 'a circle']}
YAML
LOOM_FAULTS="oom:phase=first_sample;oom:phase=train_step:step=3:times=2" \
  "$LOOM" train "$TMP/report.yaml" >"$TMP/report.out" 2>&1
rc=$?
[ "$rc" -eq 0 ] && ok "the run trains" || { bad "train exit code $rc"; tail "$TMP/report.out"; }
html="$TMP/runs/report/report.html"
[ -f "$html" ] && ok "train wrote report.html" || bad "no report.html after train"
grep -q "report:  $html" "$TMP/report.out" && ok "train names the report" || bad "train does not print the report's path"
grep -q 'class="status-completed"' "$html" && ok "the report says completed" || bad "status is not completed"
[ "$(grep -o 'class="marker oom"' "$html" | wc -l)" -eq 3 ] && ok "three OOM markers" \
  || bad "OOM markers: $(grep -o 'class="marker oom"' "$html" | wc -l) (want 3)"
grep -q 'src="samples/.*_grid.png"' "$html" && ok "sample grids linked" || bad "no sample grid"
if grep -Eq '(src|href)="(https?:)?//' "$html"; then bad "the report loads something from the network"; else ok "nothing external"; fi

browse "$html" "$TMP/report.png"
[ -s "$TMP/report.png" ] && ok "Chromium took a screenshot" || bad "no screenshot"
[ ! -s "$TMP/report.png.console" ] && ok "no console messages" \
  || { bad "console messages"; cat "$TMP/report.png.console"; }
if "$PYTHON" "$CHECK" "$TMP/report.png" loss=1f77b4:150 smoothed=0b2e59:150 \
     allocated=2ca02c:150 peak=9467bd:150 oom=d62728:150 change=ff7f0e:150 speed=17becf:150; then
  ok "the plots are drawn"
else
  bad "a plot is blank"
fi

# Killed (SIGKILL, no chance to write anything at the end) after its second checkpoint: the
# report it wrote at the checkpoint is there and whole.
tiny_job killed 200 2 >"$TMP/killed.yaml"
"$LOOM" train "$TMP/killed.yaml" --no-supervise >"$TMP/killed.out" 2>&1 &
pid=$!
wait_steps killed 5 "$pid" || { bad "the run to kill did not reach step 5"; tail "$TMP/killed.out"; }
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
khtml="$TMP/runs/killed/report.html"
[ -f "$khtml" ] && ok "a checkpoint wrote the report mid-run" || bad "no report after two checkpoints"
tail -c 20 "$khtml" 2>/dev/null | grep -q "</html>" && ok "the mid-run report is whole" || bad "the mid-run report is cut"
grep -q 'class="status-running"' "$khtml" && ok "the mid-run report says running" \
  || { bad "mid-run status"; grep -o 'class="status-[a-z-]*"' "$khtml"; }

# Does not fit: the report shows the error.
tiny_job nofit 4 >"$TMP/nofit.yaml"
"$LOOM" train "$TMP/nofit.yaml" --vram 64KiB >"$TMP/nofit.out" 2>&1
rc=$?
[ "$rc" -eq 4 ] && ok "a budget below the weights exits 4" || bad "does-not-fit exit code $rc"
fhtml="$TMP/runs/nofit/report.html"
grep -q 'id="error"' "$fhtml" 2>/dev/null && grep -q "does not fit" "$fhtml" \
  && ok "the failed run's report shows the error" || bad "the failed run's report has no error"
browse "$fhtml" "$TMP/nofit.png"
[ -s "$TMP/nofit.png" ] && [ ! -s "$TMP/nofit.png.console" ] && ok "the failed run's report opens cleanly" \
  || { bad "the failed run's report"; cat "$TMP/nofit.png.console" 2>/dev/null; }

# loom report by hand, to another file.
"$LOOM" report "$TMP/runs/report" -o "$TMP/by_hand.html" >/dev/null && [ -s "$TMP/by_hand.html" ] \
  && ok "loom report -o writes the file" || bad "loom report -o"
grep -q 'src="runs/report/samples/' "$TMP/by_hand.html" \
  && ok "its links lead into the run folder from where it is" || bad "links of a report written elsewhere"
# Every image and link of both reports resolves from where the page is.
missing=0
for page in "$html" "$TMP/by_hand.html"; do
  for ref in $(grep -o '\(src\|href\)="[^"#]*"' "$page" | sed 's/^[a-z]*="//; s/"$//'); do
    [ -e "$(dirname "$page")/$ref" ] || { missing=$((missing + 1)); echo "  missing: $ref ($page)"; }
  done
done
[ "$missing" -eq 0 ] && ok "every image and link of the reports resolves" || bad "$missing links lead nowhere"

finish
