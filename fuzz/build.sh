#!/usr/bin/env bash
# Builds the libFuzzer target for the safetensors reader into build-fuzz/ and writes its seed
# corpus to build-fuzz/corpus (fuzz/README.md). Needs clang with libFuzzer (Debian: clang-14 and
# libclang-rt-14-dev) and nlohmann-json; no torch, no CMake.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CXX="${FUZZ_CXX:-$(command -v clang++ || command -v clang++-14 || true)}"
if [ -z "$CXX" ]; then
  echo "error: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2
  exit 2
fi
OUT=build-fuzz
mkdir -p "$OUT/corpus"

"$CXX" -std=c++17 -g -O1 -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I include fuzz/safetensors_fuzz.cpp \
  src/io/safetensors_*.cpp src/io/atomic_file.cpp src/core/error.cpp src/core/utf8.cpp \
  -o "$OUT/safetensors_fuzz"

# Seeds: small valid files covering metadata, several dtypes, rank 0, empty and sub-byte tensors.
seed() {  # seed NAME HEADER DATA(printf format)
  local n=${#2}
  printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x\\x00\\x00\\x00\\x00' \
    $((n & 255)) $(((n >> 8) & 255)) $(((n >> 16) & 255)) $(((n >> 24) & 255)))" >"$OUT/corpus/$1"
  printf '%s' "$2" >>"$OUT/corpus/$1"
  printf "$3" >>"$OUT/corpus/$1"
}
seed empty '{}      ' ''
seed metadata '{"__metadata__":{"format":"pt","ss_network_dim":"4"}}' ''
seed f32 '{"a.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}' \
  '\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40\x00\x00\x80\x40'
seed mixed '{"__metadata__":{"k":"v"},"b":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]},"s":{"dtype":"U8","shape":[],"data_offsets":[6,7]},"z":{"dtype":"F16","shape":[0,4],"data_offsets":[7,7]}}' \
  '\x80\x3f\x00\x40\x40\x40\x05'
seed subbyte '{"f4":{"dtype":"F4","shape":[2,2],"data_offsets":[0,2]},"f6":{"dtype":"F6_E2M3","shape":[4],"data_offsets":[2,5]}}' \
  '\x12\x34\xff\xee\xdd'
seed unordered '{"second":{"dtype":"I16","shape":[1],"data_offsets":[8,10]},"first":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},"extra":{"dtype":"BOOL","shape":[1],"data_offsets":[10,11],"note":[1,{"x":null}]}}' \
  '\x00\x00\x00\x00\x00\x00\xf0\x3f\x01\x00\x01'
echo "built $OUT/safetensors_fuzz; seeds in $OUT/corpus ($(ls "$OUT/corpus" | wc -l) files)"
