#!/usr/bin/env bash
# Sets up everything loom needs on Debian 12 and builds it. Idempotent: when everything is in
# place it only re-runs the (no-op) incremental build.
#
#   scripts/setup.sh            install what is missing, configure and build (Release)
#   LOOM_BUILD_DIR=dir          build folder (default: build)
#   LOOM_SKIP_APT=1             do not install Debian packages (they must already be there)
#
# What it installs:
#   - Debian packages: compilers' build tools and the C++ libraries loom links (yaml-cpp, spdlog,
#     fmt, cxxopts, nlohmann-json, GoogleTest, stb, SQLiteCpp, ccache, ninja, clang-format).
#   - .venv/: a project-local Python virtual environment with PyPI's torch wheel, whose LibTorch
#     (C++ headers, libraries, CMake config) loom builds against, and the Python reference
#     packages (diffusers, transformers, peft, safetensors) the parity tests and benchmarks use.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

TORCH_VERSION="2.15.0"  # the LibTorch loom is tested with (README "Requirements")
VENV="$ROOT/.venv"
BUILD_DIR="${LOOM_BUILD_DIR:-build}"
STAMP="$VENV/.loom-torch-$TORCH_VERSION"
# Reference implementations for parity tests and benchmarks only; loom itself never imports them.
# sentencepiece and protobuf: the T5 tokenizer references (tests/parity/t5_reference.py);
# bitsandbytes and prodigyopt: the optimizer references (tests/parity/optimizer_reference.py);
# optimum-quanto: the weight quantizer (tests/parity/quantization_reference.py).
PY_PACKAGES=(diffusers==0.42.1 transformers==5.23.0 peft==0.21.2 safetensors==0.8.0 numpy
             sentencepiece==0.2.3 protobuf==7.36.2 bitsandbytes==0.50.2 prodigyopt==1.1.2
             optimum-quanto==0.2.7)
PY_STAMP="$VENV/.loom-python-$(printf '%s ' "${PY_PACKAGES[@]}" | md5sum | cut -c1-12)"

APT_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config clang-format python3-venv
  libyaml-cpp-dev libspdlog-dev libfmt-dev libcxxopts-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libstb-dev libwebp-dev libsqlitecpp-dev libsqlite3-dev
  libavformat-dev libavcodec-dev libswscale-dev libavutil-dev  # video datasets (data/video.h)
  libgloo-dev  # several processes: Gloo's headers for c10d (dist/process_group.h)
  chromium-headless-shell  # the run report's browser test (tests/report/test_report_browser.sh)
)

log() { printf '[setup] %s\n' "$*"; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

install_debian_packages() {
  [ "${LOOM_SKIP_APT:-0}" = "1" ] && return 0
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ "${#missing[@]}" -eq 0 ]; then
    log "Debian packages: all present"
    return 0
  fi
  log "Debian packages: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  as_root apt-get install -y -qq "${missing[@]}" >/dev/null
}

python_for_venv() {
  # Any Python 3.10+ with venv works; prefer the one on PATH.
  for py in python3 /usr/bin/python3; do
    if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import venv, sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
      echo "$py"; return 0
    fi
  done
  echo "error: no Python 3.10+ with the venv module found; install python3-venv" >&2
  return 1
}

install_torch() {
  if [ -f "$STAMP" ]; then
    log "torch $TORCH_VERSION: present in .venv"
    return 0
  fi
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating .venv"
    "$(python_for_venv)" -m venv "$VENV"
  fi
  log "installing torch==$TORCH_VERSION into .venv (a large download the first time)"
  # --no-compile here; install_python_references byte-compiles the whole environment once, in
  # parallel, after the last package is in.
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile \
    "torch==$TORCH_VERSION"
  # The wheel's C++ ABI must match Debian's libraries (built with the new libstdc++ ABI).
  local abi
  abi="$("$VENV/bin/python" -c 'import torch; print(int(torch.compiled_with_cxx11_abi()))' 2>/dev/null)"
  if [ "$abi" != "1" ]; then
    echo "error: torch $TORCH_VERSION was built with the old C++ ABI (_GLIBCXX_USE_CXX11_ABI=0);" \
         "Debian's yaml-cpp/spdlog use the new one and would not link. Use a cxx11-ABI wheel." >&2
    exit 1
  fi
  touch "$STAMP"
}

install_python_references() {
  if [ -f "$PY_STAMP" ]; then
    log "Python reference packages: present in .venv"
    return 0
  fi
  log "installing ${PY_PACKAGES[*]} into .venv"
  # torch pinned on the same line: pip must never swap the LibTorch the build is reading.
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile \
    "${PY_PACKAGES[@]}" "torch==$TORCH_VERSION"
  # Byte-compiled once, on every core: where PYTHONDONTWRITEBYTECODE is set (this project's
  # machines set it) Python never keeps what it compiles, and each test process importing torch
  # compiled its modules again — 5.8 s of CPU per `import torch` against 2.3 s from .pyc files
  # (docs/TESTING.md). A file compileall cannot compile (a package's deliberately broken test
  # data) is compiled, or refused, at import time as before.
  "$VENV/bin/python" -m compileall -q -j0 "$VENV"/lib/python3*/site-packages >/dev/null ||
    log "some files did not byte-compile; Python compiles them when they are imported"
  touch "$PY_STAMP"
}

configure_and_build() {
  local torch_cmake
  torch_cmake="$(ls -d "$VENV"/lib/python3*/site-packages/torch/share/cmake 2>/dev/null | head -n1)"
  if [ -z "$torch_cmake" ]; then
    echo "error: torch's CMake files were not found under .venv; delete .venv and rerun" >&2
    exit 1
  fi
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    log "configuring $BUILD_DIR"
    cmake -G Ninja -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$torch_cmake" >"$BUILD_DIR.configure.log" 2>&1 || {
        cat "$BUILD_DIR.configure.log" >&2; exit 1; }
  fi
  log "building $BUILD_DIR"
  cmake --build "$BUILD_DIR" -- -j"$(nproc)"
}

# seconds since `1`, for the phase lines (a fresh machine's time goes to downloads and the build).
since() { echo "$(($(date +%s) - $1)) s"; }

t0=$(date +%s)
install_debian_packages
log "Debian packages: $(since "$t0")"
t0=$(date +%s)
install_torch
log "torch: $(since "$t0")"
# The reference packages only serve the tests, not the build: they download and unpack while
# loom compiles (the build is CPU-bound, pip mostly waits on the network and the disk).
t0=$(date +%s)
REFS_LOG="$VENV/.loom-python-install.log"
install_python_references >"$REFS_LOG" 2>&1 &
refs_pid=$!
trap 'kill "$refs_pid" 2>/dev/null || true' EXIT
configure_and_build
log "build: $(since "$t0")"
if ! wait "$refs_pid"; then
  cat "$REFS_LOG" >&2
  echo "error: installing the Python reference packages failed (above); rerun scripts/setup.sh" >&2
  exit 1
fi
trap - EXIT
cat "$REFS_LOG"
log "Python reference packages: ready $(since "$t0") after the build started"
log "done: $BUILD_DIR/src/cli/loom"
