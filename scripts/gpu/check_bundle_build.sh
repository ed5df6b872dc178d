#!/usr/bin/env bash
# Proves that a build configured with -DLOOM_DEPS_PREFIX=PREFIX took every C++ dependency from
# the bundle (scripts/gpu_bundle.sh) and none from the system. Where the system has the same
# Debian packages (the machine that made the bundle), a bundle missing a header or a library
# would still build, silently, from /usr; on a GPU host without them it would not. Checks:
#   (a) no compiled file included a header of those packages from /usr/include
#       (ninja's dependency log, run after the build; or, with --deps FILE, the headers the dry
#       run's preprocessor listed, scripts/gpu/bundle_relink.py);
#   (b) CMake found each package's config, SQLite3 and libwebp inside PREFIX (CMakeCache.txt);
#   (c) loom and the test executables load yaml-cpp, spdlog, fmt, webp and sqlite3 from PREFIX
#       (ldd), without LD_LIBRARY_PATH.
#
#   scripts/gpu/check_bundle_build.sh BUILD_DIR PREFIX [--deps FILE]
#
# Exits 1 naming each leak, 0 when there is none.
set -euo pipefail

DEPS_FILE=""
if [ $# -eq 4 ] && [ "$3" = --deps ]; then DEPS_FILE="$4"; set -- "$1" "$2"; fi
[ $# -eq 2 ] || { echo "usage: $0 BUILD_DIR PREFIX [--deps FILE]" >&2; exit 2; }
BUILD="$1"
[ -f "$BUILD/CMakeCache.txt" ] || { echo "error: $BUILD is no configured build folder" >&2; exit 2; }
[ -d "$2/usr" ] || { echo "error: $2 is no deps prefix" >&2; exit 2; }
PREFIX="$(cd "$2" && pwd -P)"
for tool in ninja ldd realpath; do
  command -v "$tool" >/dev/null 2>&1 || { echo "error: $tool is missing" >&2; exit 2; }
done

leaks=()
leak() { leaks+=("$*"); }
inside() { case "$1" in "$PREFIX"/*) return 0 ;; *) return 1 ;; esac; }

# (a) Headers. `ninja -t deps` prints each object's recorded inputs, one path a line.
SYSTEM_HEADERS='^/usr/include/(yaml-cpp/|spdlog/|fmt/|nlohmann/|cxxopts\.hpp|stb/|gtest/|gmock/|SQLiteCpp/|webp/|gloo/|sqlite3(ext)?\.h)'
# gcc may write a header as /usr/lib/gcc/.../../../../include/x.h: compare normalized paths.
if [ -n "$DEPS_FILE" ]; then
  deps="$(xargs -r -d '\n' realpath -m -- <"$DEPS_FILE" | sort -u)"
else
  deps="$(ninja -C "$BUILD" -t deps 2>/dev/null | sed -n 's/^ *\(\/.*\)$/\1/p' | sort -u |
          xargs -r -d '\n' realpath -m -- | sort -u)"
fi
if ! grep -qF "$PREFIX/usr/include/yaml-cpp/" <<<"$deps"; then
  # An empty or foreign log would pass the leak test below without proving anything.
  leak "(a) ninja's dependency log names no header of $PREFIX/usr/include/yaml-cpp: build $BUILD first"
fi
while IFS= read -r h; do
  [ -n "$h" ] && leak "(a) header from the system: $h"
done < <(grep -E "$SYSTEM_HEADERS" <<<"$deps" || true)

# (b) What CMake found.
cache() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt"; }
cache_prefix="$(cache LOOM_DEPS_PREFIX)"
if [ -z "$cache_prefix" ] || [ "$(cd "$cache_prefix" 2>/dev/null && pwd -P)" != "$PREFIX" ]; then
  leak "(b) LOOM_DEPS_PREFIX is '${cache_prefix}', not $PREFIX"
fi
entries=0
for var in yaml-cpp_DIR spdlog_DIR fmt_DIR cxxopts_DIR nlohmann_json_DIR SQLiteCpp_DIR GTest_DIR \
           SQLite3_INCLUDE_DIR SQLite3_LIBRARY LOOM_WEBP_INCLUDE_DIR LOOM_WEBP_LIBRARY \
           LOOM_GLOO_INCLUDE_DIR; do
  value="$(cache "$var")"
  if [ -z "$value" ]; then
    leak "(b) $var is not in CMakeCache.txt"
  elif ! inside "$(realpath -m "$value")"; then
    leak "(b) $var=$value is outside the prefix"
  fi
  entries=$((entries + 1))
done

# (c) Shared libraries at run time.
LIBS='lib(yaml-cpp|spdlog|fmt|webp|webpmux|webpdemux|sqlite3)\.so'
check_ldd() {
  local exe="$1" out line lib path
  out="$(env -u LD_LIBRARY_PATH ldd "$exe" 2>&1)" || { leak "(c) ldd $exe failed: $out"; return; }
  while IFS= read -r line; do
    lib="$(awk '{print $1}' <<<"$line")"
    path="$(awk '$2 == "=>" {print $3}' <<<"$line")"
    if [ "$path" = "not" ] || [ -z "$path" ]; then
      leak "(c) $exe: $lib not found"
    elif ! inside "$(realpath -m "$path")"; then
      leak "(c) $exe: $lib from $path"
    fi
  done < <(grep -E "^[[:space:]]*$LIBS" <<<"$out" || true)
  # loom must load these five from the prefix; a test may link fewer.
  if [ "$(basename "$exe")" = loom ]; then
    for lib in libyaml-cpp libspdlog libfmt libwebp libsqlite3; do
      grep -qE "^[[:space:]]*$lib\.so" <<<"$out" || leak "(c) $exe does not load $lib at all"
    done
  fi
}
if [ -x "$BUILD/src/cli/loom" ]; then
  check_ldd "$BUILD/src/cli/loom"
else
  leak "(c) $BUILD/src/cli/loom is not built"
fi
tests=0
while IFS= read -r -d '' exe; do
  check_ldd "$exe"
  tests=$((tests + 1))
done < <(find "$BUILD/tests" -maxdepth 2 -type f -name 'test_*' -perm -u+x -print0 2>/dev/null)

if [ "${#leaks[@]}" -gt 0 ]; then
  echo "check_bundle_build: FAILED, the build used the system's copies (or misses the bundle's):" >&2
  printf '  %s\n' "${leaks[@]}" >&2
  exit 1
fi
echo "check_bundle_build: ok: $(grep -cF "$PREFIX/" <<<"$deps") headers, $entries CMake entries and" \
     "the libraries of loom and $tests test executables all come from $PREFIX"
