#!/usr/bin/env bash
# README command 1: the main job on the bundled default. Until training lands (issue 5 and the
# bundled base model of issue 9), it validates every bundled example job and shows the build and
# the devices loom sees.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
LOOM="${LOOM_BUILD_DIR:-build}/src/cli/loom"

"$LOOM" --version
echo
for job in configs/*.yaml; do
  "$LOOM" config check "$job" >/dev/null
done
echo
"$LOOM" devices
