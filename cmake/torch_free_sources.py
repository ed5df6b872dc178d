#!/usr/bin/env python3
"""Prints the sources, of those given, that include no LibTorch header, directly or through the
project's own headers (cmake/LoomDependencies.cmake, loom_use_torch_pch).

    torch_free_sources.py INCLUDE_DIR;INCLUDE_DIR;... SOURCE;SOURCE;...

Loading the torch precompiled header costs a unit 7 s to 15 s on this project's machines; a unit
that needs none of torch is faster without it. A quoted include that resolves nowhere counts as
torch (the unit keeps the header): the answer errs on the slow side, never on a broken build.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
TORCH = ("torch/", "ATen/", "c10/", "caffe2/")


def main(include_dirs, sources):
    dirs = [d for d in include_dirs.split(";") if d]
    memo = {}

    def uses_torch(path, stack=()):
        if path in memo:
            return memo[path]
        if path in stack:
            return False  # a cycle adds nothing new
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            memo[path] = True
            return True
        result = False
        for kind, name in INCLUDE.findall(text):
            if name.startswith(TORCH):
                result = True
                break
            if kind == "<":
                continue  # the standard library or another system library
            found = next((c for c in [os.path.join(os.path.dirname(path), name)] +
                          [os.path.join(d, name) for d in dirs] if os.path.isfile(c)), None)
            if found is None or uses_torch(os.path.realpath(found), stack + (path,)):
                result = True
                break
        memo[path] = result
        return result

    for s in sources.split(";"):
        if s and s.endswith((".cpp", ".cc", ".cxx")) and not uses_torch(os.path.realpath(s)):
            print(s)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
