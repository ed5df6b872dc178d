#!/usr/bin/env bash
# Packs what a GPU host lacks to build and test loom into one git-ignored folder, gpu_bundle/,
# that travels with the working tree (issue 17). The GPU host has cmake, ninja, gcc, CUDA and a
# Python with torch, transformers, peft and safetensors, but none of loom's Debian C++ libraries
# and no diffusers. Run here, on Debian 12; needs no root (apt-get download, dpkg-deb -x).
#
#   scripts/gpu_bundle.sh      create or refresh gpu_bundle/
#   GPU_BUNDLE_DIR=dir         bundle folder (default: gpu_bundle)
#
# What it holds:
#   prefix/        the Debian packages of loom's C++ dependencies (the -dev packages and the
#                  runtime libraries they link), unpacked, never installed; on the GPU host
#                  scripts/gpu/relocate_prefix.sh points their CMake and pkg-config files at the
#                  prefix, and cmake -DLOOM_DEPS_PREFIX=<prefix> builds against it
#   wheels/        diffusers (the version scripts/setup.sh pins) and the packages it needs that
#                  the GPU host may lack (no registry is reachable there); wheels/fallback/
#                  Pillow, which the host has, for a host that has not
#   MANIFEST.txt   package versions, wheel files, sizes
#
# The bundle must fit, with the tree, in what a device run carries (64 MiB); the script fails
# otherwise. Idempotent: each part is rebuilt only when its package list or versions change.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

BUNDLE="${GPU_BUNDLE_DIR:-$ROOT/gpu_bundle}"
BUDGET_BYTES=$((64 * 1024 * 1024))
PY_TAG="3.12"                           # the GPU host's Python
PLATFORM="manylinux_2_28_x86_64"        # for the binary wheel (Pillow)

# The -dev packages scripts/setup.sh installs (minus the tools), and the runtime packages their
# libraries come from (apt-cache depends). Left out on purpose: catch2 (a packaging dependency
# of libspdlog-dev, unused), googletest (GoogleTest's sources; libgtest-dev ships the built
# libraries), libstb0 (loom compiles stb's decoders in from the headers and links no libstb),
# libgloo0 and what libgloo-dev pulls in for it (hiredis, ibverbs): loom takes Gloo's headers
# only, for c10d's ProcessGroupGloo.hpp, and must never link Debian's libgloo over the Gloo
# inside libtorch_cpu (docs/MULTI_GPU.md; the dist.gloo_headers_only test).
DEV_PACKAGES=(
  libyaml-cpp-dev libspdlog-dev libfmt-dev libcxxopts-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libstb-dev libwebp-dev libsqlitecpp-dev libsqlite3-dev libgloo-dev
)
RUNTIME_PACKAGES=(
  libyaml-cpp0.7 libspdlog1.10 libfmt9 libwebp7 libwebpmux3 libwebpdemux2 libsqlite3-0
)
NOT_BUNDLED='^(catch2|googletest|libstb0|libgloo0|libhiredis-dev|libibverbs-dev|libc6|libgcc-s1|libstdc\+\+6|libc-dev|<libc-dev>)$'

# One source of truth for the diffusers version: the pin in setup.sh's PY_PACKAGES.
DIFFUSERS="$(grep -m1 -oE 'diffusers==[0-9][0-9A-Za-z.]*' scripts/setup.sh || true)"
# diffusers needs huggingface_hub, regex, requests, filelock, numpy, safetensors (there with
# transformers on the GPU host), importlib_metadata (+ zipp) and Pillow. Pillow is a binary wheel
# for the host's Python only, and the host has a Pillow of its own (KINDS.md): put onto
# PYTHONPATH it would shadow that one (and fail to import in any other Python), so it waits in
# wheels/fallback/, for a host where `import PIL` fails.
PURE_WHEELS=("$DIFFUSERS" importlib_metadata zipp)
FALLBACK_WHEELS=(pillow)

log() { printf '[gpu_bundle] %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

[ -n "$DIFFUSERS" ] || die "no diffusers==<version> pin found in scripts/setup.sh PY_PACKAGES"
for tool in apt-get apt-cache dpkg-deb git; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is missing (run this on Debian 12)"
done
PYTHON="$(command -v python3 || true)"
if [ -z "$PYTHON" ] || ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
  die "python3 with pip is needed to download the wheels"
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$BUNDLE"

# Every dependency of a bundled package must be bundled or deliberately left out, so a Debian
# update that adds a library (libwebp 1.3 split out libsharpyuv0) fails here, not on the GPU
# host.
check_package_list() {
  local dep missing=()
  for dep in $(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
                 --no-replaces --no-enhances "${DEV_PACKAGES[@]}" "${RUNTIME_PACKAGES[@]}" |
               awk '/^ *[|]?(Pre)?Depends:/ {print $2}' | sort -u); do
    [[ " ${DEV_PACKAGES[*]} ${RUNTIME_PACKAGES[*]} " == *" $dep "* ]] && continue
    [[ "$dep" =~ $NOT_BUNDLED ]] && continue
    missing+=("$dep")
  done
  [ "${#missing[@]}" -eq 0 ] ||
    die "the -dev packages depend on ${missing[*]}: add them to RUNTIME_PACKAGES (or NOT_BUNDLED)"
}

# name=version of every package apt would download now: the prefix's stamp.
candidate_versions() {
  local p v
  for p in "${DEV_PACKAGES[@]}" "${RUNTIME_PACKAGES[@]}"; do
    v="$(apt-cache policy "$p" | awk '/Candidate:/ {print $2}')"
    if [ -z "$v" ] || [ "$v" = "(none)" ]; then
      die "apt knows no candidate for $p (apt-get update?)"
    fi
    echo "$p=$v"
  done
}

download_debs() {
  local dir="$1"
  local opts=()
  # As root apt drops to the _apt user to download, which cannot write a private temp folder.
  [ "$(id -u)" -eq 0 ] && opts=(-o APT::Sandbox::User=root)
  if ! (cd "$dir" && apt-get download -qq "${opts[@]}" "${DEB_PACKAGES_PINNED[@]}"); then
    # Stale package lists: only root can refresh them.
    [ "$(id -u)" -eq 0 ] || die "apt-get download failed; run apt-get update (as root) and retry"
    log "apt-get download failed; apt-get update and retry"
    apt-get update -qq
    (cd "$dir" && apt-get download -qq "${opts[@]}" "${DEB_PACKAGES_PINNED[@]}")
  fi
}

build_prefix() {
  local versions stamp prefix="$BUNDLE/prefix"
  check_package_list
  versions="$(candidate_versions)"
  stamp="$(printf '%s\n' "$versions" | md5sum | cut -c1-12)"
  if [ -f "$prefix/.loom-bundle-$stamp" ]; then
    log "prefix: up to date ($(echo "$versions" | wc -l) packages)"
    return 0
  fi
  mapfile -t DEB_PACKAGES_PINNED <<<"$versions"
  log "prefix: downloading ${#DEB_PACKAGES_PINNED[@]} Debian packages"
  mkdir -p "$TMP/debs"
  download_debs "$TMP/debs"
  rm -rf "$prefix.new"
  mkdir -p "$prefix.new"
  local deb
  for deb in "$TMP"/debs/*.deb; do
    dpkg-deb -x "$deb" "$prefix.new"   # into the prefix only; nothing is installed
    # shellcheck disable=SC2016  # dpkg-deb's own ${field} syntax
    dpkg-deb --show --showformat='${Package} ${Version}\n' "$deb" >>"$prefix.new/.loom-packages"
  done
  strip_prefix "$prefix.new"
  touch "$prefix.new/.loom-bundle-$stamp"
  rm -rf "$prefix"
  mv "$prefix.new" "$prefix"
}

# Only what a build needs: headers, shared libraries with their .so links, the static libraries
# that are the only form of their package (GoogleTest, SQLiteCpp), CMake and pkg-config files.
strip_prefix() {
  local p="$1/usr"
  rm -rf "$p/share/doc" "$p/share/man" "$p/share/lintian" "$p/share/bug" "$p/src" \
         "$p/share/SQLiteCpp"
  local lib="$p/lib/x86_64-linux-gnu"
  # loom links these shared: their static copies would only take room.
  rm -f "$lib"/libyaml-cpp.a "$lib"/libwebp*.a "$lib"/libsqlite3.a "$lib"/libfmt.a "$lib"/libspdlog.a
  # stb is header-only as loom uses it; libstb (libstb0) is not bundled.
  rm -f "$lib"/libstb.a "$lib"/libstb.so "$lib"/pkgconfig/stb.pc
  # Gloo: the headers only (its code is libtorch_cpu's).
  rm -rf "$lib"/libgloo* "$p"/lib/libgloo* "$p"/share/cmake/Gloo
  find "$1" -xtype l -delete            # links into what was removed
  find "$1" -depth -type d -empty -delete
}

build_wheels() {
  local wheels="$BUNDLE/wheels" stamp
  stamp="$(printf '%s\n' "${PURE_WHEELS[@]}" fallback "${FALLBACK_WHEELS[@]}" "$PY_TAG" "$PLATFORM" |
           md5sum | cut -c1-12)"
  if [ -f "$wheels/.loom-wheels-$stamp" ]; then
    log "wheels: up to date"
    return 0
  fi
  log "wheels: downloading ${PURE_WHEELS[*]} ${FALLBACK_WHEELS[*]} (Python $PY_TAG)"
  rm -rf "$wheels.new"
  mkdir -p "$wheels.new"
  local pip=("$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps
             --only-binary=:all: --python-version "$PY_TAG" --dest "$wheels.new")
  "${pip[@]}" "${PURE_WHEELS[@]}"
  "${pip[@]}" --platform "$PLATFORM" --dest "$wheels.new/fallback" "${FALLBACK_WHEELS[@]}"
  touch "$wheels.new/.loom-wheels-$stamp"
  rm -rf "$wheels"
  mv "$wheels.new" "$wheels"
}

tree_bytes() {
  # What travels as the working tree: tracked files and untracked ones git does not ignore.
  git ls-files -z --cached --others --exclude-standard |
    (du --files0-from=- -cb 2>/dev/null || true) | awk 'END {print $1}'
}

# The newest glibc and libstdc++ symbol versions the bundled shared libraries ask for: the GPU
# host's must be at least these (Debian 12 builds with gcc 12 against glibc 2.36).
runtime_needs() {
  command -v objdump >/dev/null 2>&1 || { echo "unknown (no objdump)"; return 0; }
  local v
  v="$(find "$BUNDLE/prefix" -type f -name 'lib*.so.*' -exec objdump -T {} + 2>/dev/null |
       grep -oE '(GLIBC|GLIBCXX)_[0-9][0-9.]*' | sort -u)"
  printf 'glibc >= %s, libstdc++ with %s\n' \
    "$(grep '^GLIBC_' <<<"$v" | sed 's/GLIBC_//' | sort -V | tail -n1)" \
    "$(grep '^GLIBCXX_' <<<"$v" | sort -V | tail -n1)"
}

mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }

write_manifest() {
  local bundle_bytes="$1" tree="$2" m="$BUNDLE/MANIFEST.txt"
  {
    echo "loom GPU bundle, made by scripts/gpu_bundle.sh on $(date -u +%Y-%m-%d)"
    echo "from: $(. /etc/os-release && echo "$PRETTY_NAME"), $(uname -m)"
    echo
    echo "prefix/ (Debian packages, unpacked; run scripts/gpu/relocate_prefix.sh on it first):"
    sed 's/^/  /' "$BUNDLE/prefix/.loom-packages" | sort
    echo "  size: $(mib "$(du -sb "$BUNDLE/prefix" | cut -f1)")"
    echo "  the GPU host needs: $(runtime_needs)"
    echo
    echo "wheels/ (scripts/gpu_check.sh unzips them onto PYTHONPATH; or pip install --no-index --no-deps):"
    (cd "$BUNDLE/wheels" && ls -1 -- *.whl) | sed 's/^/  /'
    echo "wheels/fallback/ (only where the host's Python lacks them; cp${PY_TAG/./} binaries):"
    (cd "$BUNDLE/wheels/fallback" && ls -1 -- *.whl) | sed 's/^/  /'
    echo "  size: $(mib "$(du -sb "$BUNDLE/wheels" | cut -f1)")"
    echo
    echo "bundle: $bundle_bytes bytes ($(mib "$bundle_bytes")); tree: $tree bytes ($(mib "$tree"))"
  } >"$m"
}

build_prefix
build_wheels

TREE="$(tree_bytes)"
# The manifest counts itself: write it until the size it states is the bundle's size.
BUNDLE_BYTES=0
for _ in 1 2 3; do
  write_manifest "$BUNDLE_BYTES" "$TREE"
  size="$(du -sb "$BUNDLE" | cut -f1)"
  [ "$size" = "$BUNDLE_BYTES" ] && break
  BUNDLE_BYTES="$size"
done

log "bundle: $BUNDLE ($BUNDLE_BYTES bytes, $(mib "$BUNDLE_BYTES"))"
log "tree:   $TREE bytes ($(mib "$TREE")), tracked and untracked-not-ignored files"
log "total:  $(mib $((BUNDLE_BYTES + TREE))) of $(mib "$BUDGET_BYTES")"
if [ $((BUNDLE_BYTES + TREE)) -ge "$BUDGET_BYTES" ]; then
  die "tree + bundle is $(mib $((BUNDLE_BYTES + TREE))), over the $(mib "$BUDGET_BYTES") a device run carries"
fi
