#!/usr/bin/env python3
"""Parity test: loom's safetensors reader and writer against the reference (Python safetensors,
which wraps the Rust crate formats.md §1 describes).

    safetensors_interop.py TEST_IO_BINARY

1. The reference writer writes py_written.safetensors (every dtype it can write, a rank-0 and a
   zero-size tensor, metadata with escapes).
2. TEST_IO_BINARY --gtest_filter='Interop.*' runs with LOOM_INTEROP_DIR set: it reads that file,
   checks every byte, checks that loom's writer produces the identical file, and writes
   cpp_written.safetensors plus every malformed case of tests/io/malformed_cases.cpp.
3. The reference reader reads cpp_written.safetensors and checks every byte, and must reject each
   malformed file, except the ones where loom is deliberately stricter, which it must accept (so
   the list of deviations in include/loom/io/safetensors.h stays true).

Exits 77 (CTest SKIP_RETURN_CODE) when the safetensors package is missing.
"""

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import safetensors
except ImportError:
    print("SKIP: the safetensors Python package is not installed")
    sys.exit(77)

# (name, bits) in the reference's enum order; the index is `k` of the byte pattern.
DTYPES = [
    ("BOOL", 8), ("F4", 4), ("F6_E2M3", 6), ("F6_E3M2", 6), ("U8", 8), ("I8", 8),
    ("F8_E5M2", 8), ("F8_E4M3", 8), ("F8_E8M0", 8), ("F8_E4M3FNUZ", 8), ("F8_E5M2FNUZ", 8),
    ("I16", 16), ("U16", 16), ("F16", 16), ("BF16", 16), ("I32", 32), ("U32", 32), ("F32", 32),
    ("C64", 64), ("F64", 64), ("I64", 64), ("U64", 64),
]
# The names TensorSpec takes. The reference's Python writer has no F6 types.
SPEC_NAMES = {
    "BOOL": "bool", "F4": "float4_e2m1fn_x2", "U8": "uint8", "I8": "int8",
    "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn", "F8_E8M0": "float8_e8m0fnu",
    "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz", "I16": "int16",
    "U16": "uint16", "F16": "float16", "BF16": "bfloat16", "I32": "int32", "U32": "uint32",
    "F32": "float32", "C64": "complex64", "F64": "float64", "I64": "int64", "U64": "uint64",
}
# Must equal kInteropMetadata in test_safetensors_interop.cpp.
PY_METADATA = {"format": "pt \u00fc \"q\" \\ \n\t\x01 end"}
CPP_METADATA = {"ss_network_dim": "4", "ss_network_alpha": "4.0", "text": "\u00fc\n\"x\""}


def pattern(k, nbytes, dtype):
    """Byte j of tensor k; io_test_util.h pattern_bytes computes the same."""
    if dtype == "BOOL":
        return bytes((j + k) % 2 for j in range(nbytes))
    return bytes((j * 31 + k * 17 + 7) % 256 for j in range(nbytes))


def expected_tensors(python_writable):
    """name -> (dtype, shape, bytes); mirrors interop_tensors() in the C++ test."""
    out = {}
    for k, (dtype, bits) in enumerate(DTYPES):
        if python_writable and dtype not in SPEC_NAMES:
            continue
        out["t." + dtype] = (dtype, [2, 4], pattern(k, 8 * bits // 8, dtype))
    out["scalar"] = ("F32", [], pattern(100, 4, "F32"))
    out["empty.bf16"] = ("BF16", [0, 3], b"")
    return out


def write_reference_file(path):
    keep_alive = []
    specs = {}
    for name, (dtype, shape, data) in expected_tensors(True).items():
        buf = ctypes.create_string_buffer(data, max(len(data), 1))
        keep_alive.append(buf)
        spec_shape = list(shape)
        if dtype == "F4":
            spec_shape[-1] //= 2  # TensorSpec takes the packed storage shape
        specs[name] = safetensors.TensorSpec(dtype=SPEC_NAMES[dtype], shape=spec_shape,
                                             data_ptr=ctypes.addressof(buf), data_len=len(data))
    safetensors.serialize_file(specs, path, metadata=PY_METADATA)


def check_cpp_file(path, failures):
    with open(path, "rb") as f:
        raw = f.read()
    got = {name: (info["dtype"], list(info["shape"]), bytes(info["data"]))
           for name, info in safetensors.deserialize(raw)}
    want = expected_tensors(False)
    if sorted(got) != sorted(want):
        failures.append(f"cpp_written names: {sorted(got)} != {sorted(want)}")
    for name, value in want.items():
        if got.get(name) != value:
            failures.append(f"cpp_written tensor {name}: {got.get(name)!r} != {value!r}")
    with safetensors.safe_open(path, framework="numpy") as f:
        if f.metadata() != CPP_METADATA:
            failures.append(f"cpp_written metadata: {f.metadata()!r} != {CPP_METADATA!r}")


def check_malformed(folder, failures):
    checked = 0
    with open(os.path.join(folder, "manifest.txt")) as manifest:
        for line in manifest:
            name, verdict = line.split()
            with open(os.path.join(folder, name + ".safetensors"), "rb") as f:
                raw = f.read()
            try:
                safetensors.deserialize(raw)
                accepted = True
            except Exception:  # SafetensorError, or a Rust panic surfaced as another type
                accepted = False
            if verdict == "reject" and accepted:
                failures.append(f"malformed {name}: loom rejects it but the reference reads it")
            if verdict == "accept" and not accepted:
                failures.append(f"malformed {name}: marked as a deliberate deviation, but the "
                                "reference rejects it too")
            checked += 1
    return checked


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    test_io = sys.argv[1]
    work = tempfile.mkdtemp(prefix="loom_interop_")
    try:
        write_reference_file(os.path.join(work, "py_written.safetensors"))
        env = dict(os.environ, LOOM_INTEROP_DIR=work)
        run = subprocess.run([test_io, "--gtest_filter=Interop.*"], env=env,
                             capture_output=True, text=True)
        print(run.stdout[-4000:], run.stderr[-2000:])
        if run.returncode != 0 or "SKIPPED" in run.stdout or "[  PASSED  ] 2 tests" not in run.stdout:
            print("FAIL: the C++ side of the interop test did not pass")
            return 1
        failures = []
        check_cpp_file(os.path.join(work, "cpp_written.safetensors"), failures)
        checked = check_malformed(os.path.join(work, "malformed"), failures)
        for failure in failures:
            print("FAIL:", failure)
        print(f"safetensors {safetensors.__version__}: checked cpp_written.safetensors and "
              f"{checked} malformed files, {len(failures)} failures")
        return 1 if failures else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
