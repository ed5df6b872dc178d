#!/usr/bin/env bash
# Points the CMake and pkg-config files of an unpacked deps prefix (gpu_bundle/prefix, made by
# scripts/gpu_bundle.sh) at where the prefix lies now. Debian built those packages for /usr, and
# their files name /usr outright (pkg-config's prefix=/usr; CMake's guard against /lib -> /usr/lib
# links, "_realOrig /usr/lib/..."); after this they name <prefix>/usr instead, so nothing a build
# finds through them can come from the system's own copies.
#
#   scripts/gpu/relocate_prefix.sh PREFIX
#
# Idempotent, and it follows the tree: PREFIX/.loom-relocated-to remembers the path it last
# wrote, so when the tree is copied elsewhere a second run rewrites that path to the new one.
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 PREFIX" >&2; exit 2; }
[ -d "$1/usr" ] || { echo "error: $1 is no deps prefix (no usr/ in it; run scripts/gpu_bundle.sh)" >&2; exit 1; }

PREFIX="$(cd "$1" && pwd -P)"   # the physical path: CMake compares REALPATHs against it
STAMP="$PREFIX/.loom-relocated-to"
OLD="$(cat "$STAMP" 2>/dev/null || true)"

if [ "$OLD" = "$PREFIX" ]; then
  echo "[relocate] $PREFIX: already relocated"
  exit 0
fi
case "$PREFIX" in
  *'#'* | *$'\n'*) echo "error: the prefix path must not contain '#' or a newline: $PREFIX" >&2; exit 1 ;;
esac

ere_escape() { printf '%s' "$1" | sed -e 's/[][\.*^$+?(){}|#]/\\&/g'; }
repl_escape() { printf '%s' "$1" | sed -e 's/[\&#]/\\&/g'; }

# 1. Undo the last relocation (OLD/usr -> /usr), so every file is as Debian shipped it.
# 2. Mark each /usr that starts a path (after a quote, =, whitespace, ;, ( or -I/-L) until none
#    is left; the marker keeps a rewritten path from matching again, even when PREFIX itself
#    starts with /usr.
# 3. Replace the marker with the prefix.
MARK='@LOOM_DEPS_PREFIX@'
PATH_RE="(^|[\"'=[:space:];(]|-I|-L)/usr(/|[\"'[:space:];)]|\$)"
script=()
[ -n "$OLD" ] && script+=(-e "s#$(ere_escape "$OLD")/usr#/usr#g")
script+=(-e ":mark"
         -e "s#$PATH_RE#\\1$MARK/usr\\2#"
         -e "t mark"
         -e "s#$MARK#$(repl_escape "$PREFIX")#g")

count=0
leftover=()
while IFS= read -r -d '' f; do
  before="$(md5sum <"$f")"
  sed -E -i "${script[@]}" "$f"
  [ "$(md5sum <"$f")" = "$before" ] || count=$((count + 1))
  # Nothing may still name the system's /usr as a path (the prefix's own paths taken out first).
  if sed -E -e "s#$(ere_escape "$PREFIX")/usr##g" "$f" | grep -qE "$PATH_RE"; then
    leftover+=("$f")
  fi
done < <(find "$PREFIX/usr" -type f \( -name '*.cmake' -o -name '*.pc' \) -print0)

if [ "${#leftover[@]}" -gt 0 ]; then
  printf 'error: still naming /usr after relocation: %s\n' "${leftover[@]}" >&2
  exit 1
fi
printf '%s\n' "$PREFIX" >"$STAMP"
echo "[relocate] $PREFIX: $count files now point into the prefix${OLD:+ (were: $OLD)}"
