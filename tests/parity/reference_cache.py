#!/usr/bin/env python3
"""The parity references, made once and shared (issue 43): runs make_reference.py OUT only when
OUT does not already hold the references of these scripts and these package pins.

    reference_cache.py OUT_DIR

The key is a SHA-256 of every tests/parity/*.py and of the pins in scripts/setup.sh (the torch
version and PY_PACKAGES: the references are what those versions compute). OUT/.reference-key
holds the key of what OUT contains; it is written last, after a complete run, so an interrupted
run is made again. A second copy is kept in the shared cache, $LOOM_REFERENCE_CACHE or
~/.cache/loom/references/<key>, from which another build folder or another clone of the same
scripts fills OUT by copying instead of running every reference again.
"""
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
KEY_FILE = ".reference-key"


def pins(setup_text):
    """The lines of setup.sh that choose what the references compute."""
    torch = re.search(r'^TORCH_VERSION="([^"]+)"', setup_text, re.M)
    packages = re.search(r"^PY_PACKAGES=\((.*?)\)", setup_text, re.M | re.S)
    if not torch or not packages:
        sys.exit("reference_cache.py: scripts/setup.sh has no TORCH_VERSION or PY_PACKAGES")
    words = [w for line in packages.group(1).splitlines()
             for w in line.split("#")[0].split()]
    return f"torch=={torch.group(1)}\n" + "\n".join(words) + "\n"


def reference_key():
    h = hashlib.sha256()
    for script in sorted(HERE.glob("*.py")):
        h.update(script.name.encode() + b"\0" + script.read_bytes() + b"\0")
    h.update(pins((ROOT / "scripts" / "setup.sh").read_text()).encode())
    return h.hexdigest()[:20]


def holds(folder, key):
    try:
        return (folder / KEY_FILE).read_text().strip() == key
    except OSError:
        return False


def replace_with_copy(source, out):
    tmp = out.with_name(out.name + ".copying")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(source, tmp, symlinks=True)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def main(out):
    out = pathlib.Path(out).resolve()
    key = reference_key()
    if holds(out, key):
        print(f"references up to date in {out} (key {key})")
        return 0
    cache_root = pathlib.Path(os.environ.get("LOOM_REFERENCE_CACHE") or
                              pathlib.Path.home() / ".cache" / "loom" / "references")
    cached = cache_root / key
    if holds(cached, key):
        replace_with_copy(cached, out)
        print(f"references copied from {cached} (key {key})")
        return 0
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    rc = subprocess.call([sys.executable, str(HERE / "make_reference.py"), str(out)])
    if rc != 0:
        return rc
    (out / KEY_FILE).write_text(key + "\n")
    try:  # the shared copy is a convenience: a read-only or full home is not an error
        cache_root.mkdir(parents=True, exist_ok=True)
        replace_with_copy(out, cached)
        print(f"references made in {out} and kept in {cached} (key {key})")
    except OSError as e:
        print(f"references made in {out}; not kept in {cached}: {e}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
