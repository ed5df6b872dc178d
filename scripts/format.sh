#!/usr/bin/env bash
# Formats the C++ sources with .clang-format, or checks them with --check (exit 1 and the list
# of files that differ). The test suite runs the check.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CLANG_FORMAT="${CLANG_FORMAT:-$(command -v clang-format || command -v clang-format-14 || true)}"
if [ -z "$CLANG_FORMAT" ]; then
  echo "error: clang-format not found (scripts/setup.sh installs it)" >&2
  exit 2
fi
mapfile -t files < <(git ls-files -co --exclude-standard -- 'include/*.h' 'src/*.h' 'src/*.cpp' \
  'tests/*.h' 'tests/*.cpp' 'bench/*.cpp' 2>/dev/null || find include src tests -name '*.h' -o -name '*.cpp')
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    [ -f "$f" ] || continue
    if ! "$CLANG_FORMAT" --style=file "$f" | cmp -s - "$f"; then bad+=("$f"); fi
  done
  if [ "${#bad[@]}" -gt 0 ]; then
    echo "These files are not formatted (run scripts/format.sh):"
    printf '  %s\n' "${bad[@]}"
    exit 1
  fi
  echo "format: ${#files[@]} files clean"
else
  "$CLANG_FORMAT" --style=file -i "${files[@]}"
fi
