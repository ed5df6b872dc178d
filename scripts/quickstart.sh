#!/usr/bin/env bash
# README command 1: the quickstart. Trains configs/quickstart.yaml — a LoRA that teaches the
# bundled base model (datasets/loom-tiny-sd) a star behind the trigger word "zxq", from the 20
# images in datasets/quickstart-stars, on the simulated device with a memory budget that makes
# the first preview and the first training step run out of memory — then measures the concept
# score (tools/base_model/concept_score.py): how often "a large <colour> zxq ..." draws a star,
# with the base model alone and with the LoRA.
#
# --fresh starts the run over each time (the old run is set aside, not deleted), and the job
# does not start from the stable plan a previous quickstart recorded (oom.reuse_stable: off), so
# every quickstart shows the recoveries.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
LOOM="${LOOM_BUILD_DIR:-build}/src/cli/loom"
RUN=output/quickstart_star

"$LOOM" train configs/quickstart.yaml --fresh
echo
echo "out-of-memory events and the changes loom made ($RUN/events.jsonl):"
.venv/bin/python tools/base_model/print_recoveries.py "$RUN/events.jsonl"
echo
.venv/bin/python tools/base_model/concept_score.py "$LOOM" datasets/loom-tiny-sd \
  "$RUN/quickstart_star.safetensors" 32 "$RUN/concept_score"
