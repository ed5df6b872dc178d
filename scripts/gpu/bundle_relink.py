#!/usr/bin/env python3
"""The GPU check's dry run without a second build of loom (issue 43).

The dry run must prove what a GPU host will rely on: that loom's translation units find every
header of its Debian libraries inside the bundle's prefix, and that loom and the `gpu` test
executables link and load against the prefix's libraries alone. Compiling loom a second time
proves that and costs ten minutes of two cores; this proves it with the objects the main build
already compiled.

    bundle_relink.py DRY_BUILD MAIN_BUILD PREFIX DEPS_OUT TARGET...

DRY_BUILD is configured (not built) with -DLOOM_DEPS_PREFIX=PREFIX. For every command ninja would
run to build TARGETs there (`ninja -t commands`, in order):
  - a compilation: its includes are listed with the preprocessor alone (-M, without the
    precompiled header, which holds only <torch/torch.h>; the header itself is listed once), and
    the object is taken from MAIN_BUILD when MAIN_BUILD compiled the same sources (a unity batch's
    list included) with the same command but for the prefix's include folder (the same Debian
    packages, so the same headers' text); an object
    whose command differs (video.cpp: the prefix has no FFmpeg) is compiled here;
  - archiving and linking run as they are, against the prefix's libraries (CMake's link lines
    name them by path), and the test executables' post-build step lists their suites for CTest.
Every header the preprocessor found is written to DEPS_OUT, one path a line, for
check_bundle_build.sh --deps.
"""
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import subprocess
import sys


def compile_db(build):
    """output path (relative to the build) -> (command, directory)"""
    out = {}
    with open(os.path.join(build, "compile_commands.json")) as f:
        for c in json.load(f):
            m = re.search(r" -o (\S+)", c["command"])
            if m:
                out[m.group(1)] = c["command"]
    return out


def normalized(command, dry, main, prefix):
    """A dry command as the main build would write it, for comparison."""
    return (command.replace(f" -isystem {prefix}/usr/include", "")
            .replace(dry, main))


def unit_sources(command, build):
    """What a compilation compiles: its source file, or, for a unity batch (a file the build
    wrote, cmake/LoomUnityBuild.cmake), the sources it includes, as real paths. Two builds whose
    commands agree may still batch different sources (an object must not be reused then)."""
    words = shlex.split(command)
    source = os.path.realpath(os.path.join(build, words[words.index("-c") + 1]))
    if not source.startswith(build + os.sep):
        return (source,)
    with open(source) as f:
        found = re.findall(r'^#include "([^"]+)"', f.read(), re.M)
    return tuple(os.path.realpath(os.path.join(os.path.dirname(source), s)) for s in found)


def list_includes(command, scratch, output):
    """The headers one compilation includes, by the preprocessor alone."""
    words = shlex.split(command)
    cut, i = [], 0
    while i < len(words):
        w = words[i]
        if w in ("-o", "-MF", "-MT", "-MQ"):
            i += 2
            continue
        if w == "-include" and words[i + 1].endswith("cmake_pch.hxx"):
            i += 2
            continue
        if w in ("-c", "-MD", "-MMD"):
            i += 1
            continue
        cut.append(w)
        i += 1
    depfile = os.path.join(scratch, output.replace("/", "_") + ".d")
    r = subprocess.run(cut + ["-M", "-MF", depfile], capture_output=True, text=True)
    if r.returncode != 0:
        return output, None, r.stderr[-2000:]
    with open(depfile) as f:
        text = f.read().replace("\\\n", " ")
    headers = text.split(":", 1)[1].split()
    return output, headers, ""


def main(dry, main_build, prefix, deps_out, *targets):
    dry, main_build = os.path.realpath(dry), os.path.realpath(main_build)
    prefix = os.path.realpath(prefix)
    commands = subprocess.run(["ninja", "-C", dry, "-t", "commands", *targets], check=True,
                              capture_output=True, text=True).stdout.splitlines()
    dry_db, main_db = compile_db(dry), compile_db(main_build)
    scratch = os.path.join(dry, "bundle_includes")
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)

    compiles = [(o, c) for o, c in dry_db.items() if any(f" -o {o} " in line for line in commands)]
    # The precompiled header's own text, once (the per-unit scans leave it out).
    pch = next((c for o, c in compiles if o.endswith(".gch")), None)
    scans = [(o, c) for o, c in compiles if not o.endswith(".gch")]
    if pch:
        scans.append(("pch", pch.replace(" -x c++-header", "")))
    headers, failures = set(), []
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        for output, found, error in pool.map(lambda oc: list_includes(oc[1], scratch, oc[0]),
                                             scans):
            if found is None:
                failures.append(f"{output}: {error}")
            else:
                headers.update(found)
    if failures:
        print("bundle_relink: the preprocessor failed on these units (a header missing from "
              "the bundle?):", *failures, sep="\n  ", file=sys.stderr)
        return 1
    with open(deps_out, "w") as f:
        for h in sorted(headers):
            f.write(os.path.realpath(os.path.join(dry, h)) + "\n")

    reused = compiled = 0
    for line in commands:
        m = re.search(r" -o (\S+)", line)
        output = m.group(1) if m else None
        if output in dry_db and not output.endswith(".gch"):
            same = (main_db.get(output) == normalized(dry_db[output], dry, main_build, prefix)
                    and unit_sources(main_db[output], main_build)
                    == unit_sources(dry_db[output], dry))
            source = os.path.join(main_build, output)
            if same and os.path.exists(source):
                target = os.path.join(dry, output)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                if os.path.exists(target):
                    os.remove(target)
                try:
                    os.link(source, target)
                except OSError:
                    shutil.copy2(source, target)
                reused += 1
                continue
            compiled += 1
        elif output and output.endswith(".gch"):
            # Needed only by a unit compiled here with the precompiled header; built on demand.
            if not any(" -include " in dry_db[o] and
                       main_db.get(o) != normalized(dry_db[o], dry, main_build, prefix)
                       for o, _ in scans if o in dry_db):
                continue
        r = subprocess.run(line, shell=True, cwd=dry, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"bundle_relink: failed in {dry}:\n{line[:400]}\n{r.stdout[-3000:]}"
                  f"{r.stderr[-3000:]}", file=sys.stderr)
            return 1
    print(f"bundle_relink: {len(scans)} units' includes listed ({len(headers)} headers), "
          f"{reused} objects taken from {main_build}, {compiled} compiled here, "
          f"{', '.join(targets)} linked against {prefix}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
