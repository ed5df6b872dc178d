#!/usr/bin/env python3
"""Checks that loom's layers depend downward only (DESIGN.md "Layers").

Usage: check_layering.py [ROOT] [--skip RULE]...   (ROOT defaults to the repository root)

Rules, each named for --skip:
  includes    A file under src/<X>/ or include/loom/<X>/ includes only its own layer and the
              layers below X: `#include "loom/<Y>/..."` needs Y below X. Quoted includes that
              reach into another layer's src/ folder (`"../device/device_impls.h"`) are refused
              whatever the direction: a layer's private headers are its own. A public header
              (include/loom/) may not include a private one (src/): users of the layer cannot.
  cmake       src/<X>/CMakeLists.txt links only lower layers (`loom_layer(X ... DEPS ...)` and
              `target_link_libraries(...)` naming loom_<Y>).
  host_scope  Only the device layer names HostScope, the sim allocator's "this is host memory"
              switch (device/sim_allocator.h); the other layers use HostAllocations
              (device/host_memory.h) or Device::to_host(). Comments may mention it.
  layers      Every folder of src/ and include/loom/ is a layer this script knows, so a new layer
              gets its place in the order (LAYERS below) before it gets code.
  model_folders
              Inside the model layer (docs/ARCHITECTURE.md "The model layer"): a shared folder
              (MODEL_SHARED: nn/, text/, vae/, ...) includes only shared folders, never a family's
              folder nor the family seam at the top of model/; a family's folder (MODEL_FAMILIES)
              includes the shared folders, the seam, and only the families it names as built on
              (Chroma on flux/, ...). Every folder of src/model/ and include/loom/model/ is listed
              in one of the two, so a new folder says which it is.

Tests (tests/) are not checked: a test may include anything.
Prints one line per violation, `file:line: what: why`, and exits 1 when there is any.
Python 3 standard library only.
"""

import argparse
import os
import re
import sys
from pathlib import Path

# Each layer and the layers directly below it (DESIGN.md "Layers" and "Growing the house");
# a layer may include everything reachable from it. The existing layers form one chain,
# core <- io <- device <- config <- model <- lora <- data <- guard <- train <- store <- cli;
# dist sits above device and below guard, doctor above guard and below cli only, report above
# store and below cli.
LAYERS = {
    "core": [],
    "io": ["core"],
    "device": ["io"],
    "dist": ["device"],
    "config": ["device"],
    "model": ["config"],
    "lora": ["model"],
    "data": ["lora"],
    "guard": ["data", "dist"],
    "train": ["guard"],
    "store": ["train"],
    "doctor": ["guard"],
    "report": ["store"],
    "cli": ["store", "doctor", "report"],
}

# The model layer's folders. Shared ones hold what more than one family computes and may not
# reach a family; each family lists the families whose code it is built on.
MODEL_SHARED = ("nn", "schedules", "text", "tokenizers", "vae", "loading")
MODEL_FAMILIES = {
    "sd": [],
    "flux": [],
    "wan": [],
    "wan22": ["wan"],  # Wan 2.2 14B: two Wan 2.1 transformers over its VAE and UMT5
    "chroma": ["flux"],  # Chroma: Flux's blocks without their modulation Linears
    "zimage": ["flux"],  # Z-Image: Flux's VAE, its previews' noise drawn as Flux's pipeline does
    "qwenimage": ["flux"],  # Qwen-Image: Flux's double-stream blocks under Qwen's names
}

# The only layers whose code may name HostScope.
HOST_SCOPE_LAYERS = {"device"}

SOURCE_SUFFIXES = (".h", ".hpp", ".hh", ".cpp", ".cc", ".cxx", ".inc", ".ipp", ".h.in")
RULES = ("includes", "cmake", "host_scope", "layers", "model_folders")

DOWNWARD = "(DESIGN.md: dependencies point downward)"


def below(layer):
    """The layers `layer` may depend on (not itself)."""
    seen = set()
    stack = list(LAYERS[layer])
    while stack:
        lower = stack.pop()
        if lower not in seen:
            seen.add(lower)
            stack.extend(LAYERS[lower])
    return seen


class Violation:
    def __init__(self, path, line, what, why):
        self.path, self.line, self.what, self.why = path, line, what, why

    def __str__(self):
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.what}: {self.why}"


def strip_code(text):
    """The text with comments and the contents of string and character literals blanked out
    (newlines kept, so line numbers stay), for finding names in code only."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum()
                                                                      or text[i - 1] == "_")):
            m = re.match(r'R"([^()\\\s]{0,16})\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i + m.end())
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('R"' + re.sub(r"[^\n]", " ", text[i + 2:j - 1]) + '"')
            i = j
        elif c == '"' or (c == "'" and not (i > 0 and text[i - 1].isdigit())):  # not 100'000
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else text[i:j])
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


INCLUDE_DIRECTIVE = re.compile(r"^\s*#\s*include\b")
INCLUDE_PATH = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def where_is(root, path):
    """(layer, "public"|"private") for a path under include/loom/<layer>/ or src/<layer>/."""
    try:
        parts = path.resolve().relative_to(root.resolve()).parts
    except ValueError:
        return None
    if len(parts) >= 4 and parts[0] == "include" and parts[1] == "loom":
        return parts[2], "public"
    if len(parts) >= 3 and parts[0] == "src":
        return parts[1], "private"
    return None


def included_layer(root, file_path, owner, quote, target):
    """Where an include points: (layer, "public"|"private"), or None for anything not loom's
    (the standard library, torch, nlohmann, ...)."""
    if target.startswith("loom/"):
        parts = target.split("/")
        return (parts[1], "public") if len(parts) >= 3 else None
    if quote != '"':
        return None
    # A quoted include is looked up next to the file, then in the layer's own src/ folder and
    # include/ (loom_layer's include folders). The first that exists wins; otherwise the path as
    # written next to the file is what a reader would take it for.
    candidates = [file_path.parent / target, root / "src" / owner / target,
                  root / "include" / target]
    found = next((c for c in candidates if c.is_file()), None)
    place = where_is(root, found if found is not None else candidates[0])
    # "src/<layer>/x.h" written from the repository root (an include folder some target adds).
    m = re.match(r"^(?:\.\./)*src/([^/]+)/", target)
    return (m.group(1), "private") if m else place


def check_includes(root, rel, owner, kind, lines, violations):
    for number, (code_line, line) in enumerate(lines, start=1):
        if not INCLUDE_DIRECTIVE.match(code_line):
            continue
        m = INCLUDE_PATH.match(line)
        if not m:
            continue
        quote, target = m.group(1), m.group(2)
        shown = f'#include {quote}{target}{">" if quote == "<" else quote}'
        place = included_layer(root, root / rel, owner, quote, target)
        if place is None:
            continue
        layer, visibility = place
        if layer not in LAYERS:
            violations.append(Violation(
                rel, number, shown,
                f"'{layer}' is not a known layer (add it to LAYERS in {script_name()} and to "
                "DESIGN.md's layer table)"))
        elif layer == owner:
            if kind == "public" and visibility == "private":
                violations.append(Violation(
                    rel, number, shown,
                    f"a public header of layer {owner} may not include a private header of "
                    f"src/{owner}/ (code that includes loom/{owner}/ cannot see src/)"))
        elif layer not in below(owner):
            violations.append(Violation(
                rel, number, shown, f"layer {owner} may not include layer {layer} {DOWNWARD}"))
        elif visibility == "private":
            violations.append(Violation(
                rel, number, shown,
                f"layer {owner} may not include a private header of layer {layer} (src/{layer}/ "
                f"is internal to {layer}; what others need belongs in include/loom/{layer}/)"))


def model_folder_of(root, path):
    """The folder of the model layer a path lies in: "nn", "flux", ..., "" for a file at the top
    of model/ (the family seam), None outside the model layer."""
    try:
        parts = path.resolve().relative_to(root.resolve()).parts
    except ValueError:
        return None
    if parts[:3] == ("include", "loom", "model"):
        rest = parts[3:]
    elif parts[:2] == ("src", "model"):
        rest = parts[2:]
    else:
        return None
    return rest[0] if len(rest) > 1 else ""


def included_model_file(root, file_path, quote, target):
    """The file an include inside the model layer points to, or None when it is not model's."""
    if target.startswith("loom/model/"):
        return root / "include" / target
    if quote != '"':
        return None
    for candidate in (file_path.parent / target, root / "src" / "model" / target):
        if candidate.is_file():
            return candidate
    return None


def check_model_folders(root, rel, lines, violations):
    mine = model_folder_of(root, root / rel)
    if mine is None or mine == "":
        return  # outside the model layer, or the seam at its top (which sees every family)
    known = set(MODEL_SHARED) | set(MODEL_FAMILIES)
    if mine not in known:
        return  # reported once per folder by check()
    for number, (code_line, line) in enumerate(lines, start=1):
        if not INCLUDE_DIRECTIVE.match(code_line):
            continue
        m = INCLUDE_PATH.match(line)
        if not m:
            continue
        target = included_model_file(root, root / rel, m.group(1), m.group(2))
        theirs = model_folder_of(root, target) if target is not None else None
        if theirs is None or theirs == mine or theirs in MODEL_SHARED:
            continue
        shown = f'#include {m.group(1)}{m.group(2)}{">" if m.group(1) == "<" else m.group(1)}'
        if mine in MODEL_SHARED:
            what = ("the family seam" if theirs == "" else f"the {theirs} family's folder")
            violations.append(Violation(
                rel, number, shown,
                f"model/{mine}/ is shared and may not include {what} (what several families "
                f"compute lives in a shared folder; MODEL_SHARED in {script_name()})"))
        elif theirs != "" and theirs not in MODEL_FAMILIES.get(mine, []):
            violations.append(Violation(
                rel, number, shown,
                f"the {mine} family may not include the {theirs} family's folder unless it is "
                f"built on it (MODEL_FAMILIES['{mine}'] in {script_name()}); share the piece "
                "through a shared folder instead"))


def check_host_scope(rel, owner, lines, violations):
    if owner in HOST_SCOPE_LAYERS:
        return
    for number, (code_line, _) in enumerate(lines, start=1):
        if re.search(r"\bHostScope\b", code_line):
            violations.append(Violation(
                rel, number, "names HostScope",
                f"only the device layer may name HostScope (the sim allocator's switch); layer "
                f"{owner} uses HostAllocations (loom/device/host_memory.h) or Device::to_host()"))


def cmake_calls(text, names):
    """(command, line, arguments) of each call to one of `names`, comments removed."""
    text = re.sub(r"#[^\n]*", lambda m: " " * len(m.group(0)), text)
    for m in re.finditer(r"\b(" + "|".join(names) + r")\s*\(", text):
        depth, j = 1, m.end()
        while j < len(text) and depth > 0:
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
        line = text.count("\n", 0, m.start()) + 1
        yield m.group(1), line, text[m.end():j - 1]


def check_cmake(root, owner, violations):
    path = root / "src" / owner / "CMakeLists.txt"
    if not path.is_file():
        return
    rel = path.relative_to(root).as_posix()
    text = path.read_text(encoding="utf-8", errors="replace")
    for command, line, args in cmake_calls(text, ["loom_layer", "target_link_libraries"]):
        words = args.split()
        if command == "loom_layer":
            words = words[words.index("DEPS") + 1:] if "DEPS" in words else []
        for word in words:
            m = re.fullmatch(r"loom_([a-z0-9_]+)", word)
            if not m or m.group(1) not in LAYERS or m.group(1) == owner:
                continue  # not a layer library (loom_torch, the target itself, ...)
            lower = m.group(1)
            if lower not in below(owner):
                violations.append(Violation(
                    rel, line, f"{command}(... {word} ...)",
                    f"layer {owner} may not link layer {lower} {DOWNWARD}"))


def script_name():
    return "tests/style/check_layering.py"


def source_files(folder):
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(SOURCE_SUFFIXES):
                yield Path(dirpath) / name


def check(root, skip=()):
    """All violations under `root` (a repository checkout), in a stable order."""
    root = Path(root)
    violations = []
    folders = []  # (owner, kind, folder)
    for base, kind in ((root / "src", "private"), (root / "include" / "loom", "public")):
        if not base.is_dir():
            continue
        for folder in sorted(p for p in base.iterdir() if p.is_dir()):
            rel = folder.relative_to(root).as_posix()
            if folder.name not in LAYERS:
                if "layers" not in skip:
                    violations.append(Violation(
                        rel, 0, "folder",
                        f"'{folder.name}' is not a known layer (add it to LAYERS in "
                        f"{script_name()} and to DESIGN.md's layer table)"))
                continue
            folders.append((folder.name, kind, folder))
    if "model_folders" not in skip:
        for base in (root / "src" / "model", root / "include" / "loom" / "model"):
            if not base.is_dir():
                continue
            for folder in sorted(p for p in base.iterdir() if p.is_dir()):
                if folder.name not in MODEL_SHARED and folder.name not in MODEL_FAMILIES:
                    violations.append(Violation(
                        folder.relative_to(root).as_posix(), 0, "folder",
                        f"'{folder.name}' is neither a shared folder nor a family of the model "
                        f"layer (add it to MODEL_SHARED or MODEL_FAMILIES in {script_name()})"))
    for owner, kind, folder in folders:
        for path in source_files(folder):
            rel = path.relative_to(root).as_posix()
            text = path.read_text(encoding="utf-8", errors="replace")
            lines = list(zip(strip_code(text).split("\n"), text.split("\n")))
            if "includes" not in skip:
                check_includes(root, rel, owner, kind, lines, violations)
            if "host_scope" not in skip:
                check_host_scope(rel, owner, lines, violations)
            if "model_folders" not in skip and owner == "model":
                check_model_folders(root, rel, lines, violations)
        if kind == "private" and "cmake" not in skip:
            check_cmake(root, owner, violations)
    return violations


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_root = Path(__file__).resolve().parents[2]
    parser.add_argument("root", nargs="?", default=str(default_root),
                        help="repository root (default: %(default)s)")
    parser.add_argument("--skip", action="append", default=[], choices=RULES,
                        help="leave out one rule (repeatable)")
    args = parser.parse_args(argv)
    root = Path(args.root)
    if not (root / "src").is_dir():
        print(f"error: {root} has no src/ folder (pass the repository root)", file=sys.stderr)
        return 2
    violations = check(root, skip=set(args.skip))
    for v in violations:
        print(v)
    if violations:
        print(f"layering: {len(violations)} violation(s) (DESIGN.md \"Layers\"; "
              f"{script_name()} says how to read them)")
        return 1
    print("layering: clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
