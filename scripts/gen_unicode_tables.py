#!/usr/bin/env python3
"""Generates src/model/tokenizers/unicode_tables.cpp, the Unicode data behind loom::CLIPTokenizer.

The reference is transformers' CLIPTokenizer, which in transformers 5.x is backed by the Rust
`tokenizers` library: its normalizer is NFC -> Replace(\\s+, " ") -> Lowercase and its
pre-tokenizer splits with an Oniguruma regex using \\p{L} and \\p{N}. Each of those pieces ships
its own Unicode version (Oniguruma's properties, Rust's char::to_lowercase, the
unicode-normalization-alignments crate), and none of them matches Python's unicodedata or the
`regex` package exactly. So instead of reading the Unicode Character Database, this script asks
the installed `tokenizers` library itself, one code point at a time (in batches), and records
what it does:

  * letters / numbers / whitespace: which code points Oniguruma's \\p{L}, \\p{N}, \\s match;
  * lower-casing: what normalizers.Lowercase() turns each code point into (1 or 2 code points);
  * NFC: full canonical decompositions (normalizers.NFD() of each code point), canonical
    combining classes (found by watching NFD reorder each code point against marks of known
    classes), and primary compositions (composites that survive normalizers.NFC(), paired via
    Python's one-level decomposition and then checked against normalizers.NFC()).

It then re-implements NFC in Python from the recorded tables and checks it against
normalizers.NFC() on random strings before writing anything.

Usage: .venv/bin/python scripts/gen_unicode_tables.py [--out src/model/tokenizers/unicode_tables.cpp]
"""

import argparse
import random
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import tokenizers
from tokenizers import Regex, normalizers

ROOT = Path(__file__).resolve().parent.parent
MAX_CP = 0x110000
SEP = "\x00"  # a starter with no decomposition, composition or case mapping


def all_code_points():
    return [c for c in range(MAX_CP) if not 0xD800 <= c <= 0xDFFF]


def regex_property(pattern, cps):
    """Code points matched by the one-character Oniguruma `pattern`, as tokenizers compiles it."""
    replace = normalizers.Replace(Regex(pattern), SEP)
    body = [c for c in cps if c != 0]
    out = replace.normalize_str("".join(map(chr, body)))
    assert len(out) == len(body), pattern
    matched = {c for c, ch in zip(body, out) if ch == SEP}
    if normalizers.Replace(Regex(pattern), "X").normalize_str(SEP) == "X":
        matched.add(0)
    return matched


def per_code_point(normalizer, cps):
    """{cp: normalizer(chr(cp))} for the code points the normalizer changes."""
    body = [c for c in cps if c != 0]
    out = normalizer.normalize_str(SEP.join(map(chr, body))).split(SEP)
    assert len(out) == len(body)
    return {c: o for c, o in zip(body, out) if o != chr(c)}


def ranges(cps):
    out = []
    for c in sorted(cps):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def combining_classes(cps, decomposable):
    """{cp: ccc} for ccc != 0, probed through NFD's canonical reordering.

    With a mark M of class v: NFD(cp M) swaps them iff ccc(cp) > v, and NFD(M cp) swaps them
    iff 0 < ccc(cp) < v. One mark per class that Python knows gives each class exactly."""
    nfd = normalizers.NFD()
    pivots = {}  # class -> a mark tokenizers knows to have that class (not merely Python)
    for c in range(0x300, MAX_CP):
        v = unicodedata.combining(chr(c))
        if not v or v in pivots or c in decomposable:
            continue
        other = 0x334 if v > 1 else 0x301  # classes 1 and 230
        if nfd.normalize_str(chr(c) + chr(other)) == chr(other) + chr(c) or (
            v == 1 and nfd.normalize_str(chr(other) + chr(c)) == chr(c) + chr(other)
        ):
            pivots[v] = c
    candidates = [c for c in cps if c != 0 and c not in decomposable]
    above = {}  # cp -> set of pivot classes below ccc(cp)
    below = {}  # cp -> set of pivot classes above ccc(cp)
    for v, mark in sorted(pivots.items()):
        m = chr(mark)
        after = nfd.normalize_str(SEP.join(chr(c) + m for c in candidates)).split(SEP)
        before = nfd.normalize_str(SEP.join(m + chr(c) for c in candidates)).split(SEP)
        for c, a, b in zip(candidates, after, before):
            if c == mark:
                continue  # a swap of two equal marks is invisible; the pivot has class v
            if a == m + chr(c):
                above.setdefault(c, set()).add(v)
            if b == chr(c) + m:
                below.setdefault(c, set()).add(v)
    result = {}
    for c in set(above) | set(below):
        lo, hi = above.get(c, set()), below.get(c, set())
        exact = [v for v in pivots if v not in lo and v not in hi]
        if len(exact) != 1:
            sys.exit(f"U+{c:04X}: combining class is not one of the probed classes")
        result[c] = exact[0]
    for v, mark in pivots.items():
        if result.get(mark) != v:
            sys.exit(f"pivot U+{mark:04X} does not have class {v} in tokenizers")
    return result


def compositions(decompositions, nfc_changes):
    """{(first, second): composite} for the primary composites NFC produces."""
    nfc = normalizers.NFC()
    pairs = {}
    for c, full in decompositions.items():
        if c in nfc_changes:
            continue  # excluded from composition (singleton, non-starter or listed exclusion)
        parts = unicodedata.decomposition(chr(c)).split()
        if not parts or parts[0].startswith("<") or len(parts) != 2:
            sys.exit(f"U+{c:04X}: composes in tokenizers but has no two-part decomposition")
        a, b = (int(p, 16) for p in parts)
        if unicodedata.normalize("NFD", chr(c)) != full:
            sys.exit(f"U+{c:04X}: Python and tokenizers disagree on its decomposition")
        pairs[(a, b)] = c
    probe = nfc.normalize_str(SEP.join(chr(a) + chr(b) for a, b in pairs)).split(SEP)
    for (a, b), got in zip(pairs, probe):
        if got != chr(pairs[(a, b)]):
            sys.exit(f"U+{a:04X} U+{b:04X} does not compose as expected")
    return pairs


# Hangul syllables are decomposed and composed arithmetically (Unicode 3.12).
S_BASE, L_BASE, V_BASE, T_BASE = 0xAC00, 0x1100, 0x1161, 0x11A7
L_COUNT, V_COUNT, T_COUNT = 19, 21, 28
N_COUNT = V_COUNT * T_COUNT
S_COUNT = L_COUNT * N_COUNT


def model_nfd_hangul(c):
    i = c - S_BASE
    out = chr(L_BASE + i // N_COUNT) + chr(V_BASE + (i % N_COUNT) // T_COUNT)
    return out + (chr(T_BASE + i % T_COUNT) if i % T_COUNT else "")


def model_nfc(text, ccc, decompositions, pairs):
    """NFC from the recorded tables, the same algorithm as clip_tokenizer_text.cpp."""
    out = []
    for ch in text:
        c = ord(ch)
        if S_BASE <= c < S_BASE + S_COUNT:
            out += [ord(d) for d in model_nfd_hangul(c)]
        elif c in decompositions:
            out += [ord(d) for d in decompositions[c]]
        else:
            out.append(c)
    # canonical ordering: stable sort of each run of non-starters by class
    i = 0
    while i < len(out):
        if ccc.get(out[i], 0) == 0:
            i += 1
            continue
        j = i
        while j < len(out) and ccc.get(out[j], 0) != 0:
            j += 1
        out[i:j] = sorted(out[i:j], key=lambda c: ccc[c])
        i = j
    # canonical composition
    result = []
    starter = None  # index into result
    last_class = 0
    for c in out:
        cc = ccc.get(c, 0)
        if starter is not None and (last_class < cc or (last_class == 0 and len(result) == starter + 1)):
            s = result[starter]
            composed = None
            if L_BASE <= s < L_BASE + L_COUNT and V_BASE <= c < V_BASE + V_COUNT:
                composed = S_BASE + ((s - L_BASE) * V_COUNT + (c - V_BASE)) * T_COUNT
            elif (S_BASE <= s < S_BASE + S_COUNT and (s - S_BASE) % T_COUNT == 0
                  and T_BASE < c < T_BASE + T_COUNT):
                composed = s + (c - T_BASE)
            else:
                composed = pairs.get((s, c))
            if composed is not None:
                result[starter] = composed
                continue
        if cc == 0:
            starter = len(result)
            last_class = 0
        else:
            last_class = cc
        result.append(c)
    return "".join(map(chr, result))


def check_nfc(ccc, decompositions, pairs):
    nfc = normalizers.NFC()
    rng = random.Random(1234)
    marks = sorted(ccc)
    composites = sorted(set(pairs.values()) | set(decompositions))
    starters = sorted({a for a, _ in pairs}) + [ord(c) for c in "aeiouAEIOU "]
    hangul = list(range(0x1100, 0x1114)) + list(range(0x1160, 0x1177)) + list(range(0x11A7, 0x11C4))
    hangul += [0xAC00, 0xAC01, 0xD7A3, 0xB098]
    pools = [marks, composites, starters, hangul]
    cases = []
    for _ in range(200000):
        n = rng.randint(1, 6)
        cases.append("".join(chr(rng.choice(rng.choice(pools))) for _ in range(n)))
    expected = nfc.normalize_str(SEP.join(cases)).split(SEP)
    bad = [c for c, e in zip(cases, expected) if model_nfc(c, ccc, decompositions, pairs) != e]
    if bad:
        sample = " ".join(f"U+{ord(ch):04X}" for ch in bad[0])
        sys.exit(f"model NFC disagrees with tokenizers on {len(bad)} strings, e.g. {sample}")
    return len(cases)


def emit_array(name, ctype, rows):
    """A constexpr array with as many rows per line as fit in 100 columns."""
    lines = [f"constexpr {ctype} {name}[] = {{"]
    line = "   "
    for row in rows:
        if len(line) + len(row) + 2 > 100:
            lines.append(line)
            line = "   "
        line += f" {row},"
    lines.append(line)
    lines.append("};")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "src/model/tokenizers/unicode_tables.cpp")
    args = parser.parse_args()

    cps = all_code_points()
    letters = regex_property(r"\p{L}", cps)
    numbers = regex_property(r"\p{N}", cps)
    spaces = regex_property(r"\s", cps)
    lower = per_code_point(normalizers.Lowercase(), cps)
    decompositions = per_code_point(normalizers.NFD(), cps)
    nfc_changes = per_code_point(normalizers.NFC(), cps)
    hangul = {c for c in decompositions if S_BASE <= c < S_BASE + S_COUNT}
    for c in hangul:
        if model_nfd_hangul(c) != decompositions.pop(c):
            sys.exit(f"U+{c:04X}: tokenizers decomposes this Hangul syllable unexpectedly")
    ccc = combining_classes(cps, set(decompositions) | hangul)
    pairs = compositions(decompositions, nfc_changes)
    checked = check_nfc(ccc, decompositions, pairs)

    if any(len(v) > 2 for v in lower.values()):
        sys.exit("a lower-case mapping longer than two code points; extend LowercaseMapping")
    if any(len(v) > 4 for v in decompositions.values()):
        sys.exit("a decomposition longer than four code points; extend Decomposition")

    py_letters = {c for c in cps if unicodedata.category(chr(c)).startswith("L")}
    py_numbers = {c for c in cps if unicodedata.category(chr(c)).startswith("N")}
    py_lower = {c for c in cps if chr(c).lower() != chr(c)}
    print(f"tokenizers {tokenizers.__version__}; Python unicodedata {unicodedata.unidata_version}")
    print(f"letters {len(letters)} ({len(letters - py_letters)} unknown to unicodedata), "
          f"numbers {len(numbers)} ({len(numbers - py_numbers)} unknown), whitespace {len(spaces)}")
    py_ccc = {c for c in cps if unicodedata.combining(chr(c))}
    print(f"combining classes {len(ccc)} ({len(py_ccc ^ set(ccc))} differ from unicodedata, "
          "decomposable code points aside)")
    print(f"lowercase {len(lower)} (unicodedata differs on {len(set(lower) ^ py_lower)}), "
          f"decompositions {len(decompositions)}, "
          f"compositions {len(pairs)}; NFC model checked on {checked} random strings")

    def range_rows(cps_set):
        return [f"{{0x{a:X}, 0x{b:X}}}" for a, b in ranges(cps_set)]

    ccc_ranges = []
    for c in sorted(ccc):
        if ccc_ranges and ccc_ranges[-1][1] == c - 1 and ccc_ranges[-1][2] == ccc[c]:
            ccc_ranges[-1][1] = c
        else:
            ccc_ranges.append([c, c, ccc[c]])

    lower_rows = []
    for c in sorted(lower):
        to = [ord(x) for x in lower[c]] + [0]
        lower_rows.append(f"{{0x{c:X}, 0x{to[0]:X}, 0x{to[1]:X}}}")
    decomposition_rows = []
    for c in sorted(decompositions):
        parts = [ord(x) for x in decompositions[c]]
        padded = parts + [0] * (4 - len(parts))
        decomposition_rows.append(
            f"{{0x{c:X}, {{{', '.join(f'0x{p:X}' for p in padded)}}}, {len(parts)}}}")
    composition_rows = [f"{{0x{a:X}, 0x{b:X}, 0x{c:X}}}" for (a, b), c in sorted(pairs.items())]

    text = f"""\
// Generated by scripts/gen_unicode_tables.py from tokenizers {tokenizers.__version__}; do not edit.
// Regenerate: .venv/bin/python scripts/gen_unicode_tables.py
//
// The data is probed from the reference implementation (Hugging Face tokenizers, as used by
// transformers' CLIPTokenizer), not read from a Unicode Character Database, so that it matches
// the Unicode versions of Oniguruma (\\p{{L}}, \\p{{N}}, \\s), Rust's char::to_lowercase and the
// NFC crate that tokenizers was built with.

#include "loom/model/tokenizers/unicode_tables.h"

#include <algorithm>
#include <cstdint>
#include <iterator>

namespace loom::unicode {{

namespace {{

struct Range {{
    char32_t first;
    char32_t last;
}};

struct ClassRange {{
    char32_t first;
    char32_t last;
    std::uint8_t combining_class;
}};

struct LowercaseMapping {{
    char32_t from;
    char32_t to;
    char32_t to_second;  // 0 when the mapping is a single code point
}};

struct Decomposition {{
    char32_t from;
    char32_t to[4];
    std::uint8_t length;
}};

struct Composition {{
    char32_t first;
    char32_t second;
    char32_t composite;
}};

// clang-format off
{emit_array("kLetters", "Range", range_rows(letters))}

{emit_array("kNumbers", "Range", range_rows(numbers))}

{emit_array("kWhitespace", "Range", range_rows(spaces))}

{emit_array("kCombiningClasses", "ClassRange", [f"{{0x{a:X}, 0x{b:X}, {v}}}" for a, b, v in ccc_ranges])}

{emit_array("kLowercase", "LowercaseMapping", lower_rows)}

{emit_array("kDecompositions", "Decomposition", decomposition_rows)}

{emit_array("kCompositions", "Composition", composition_rows)}
// clang-format on

template <class T, std::size_t N>
const T* find_range(const T (&table)[N], char32_t c) {{
    const T* it = std::upper_bound(std::begin(table), std::end(table), c,
                                   [](char32_t value, const T& r) {{ return value < r.first; }});
    if (it == std::begin(table)) return nullptr;
    --it;
    return c <= it->last ? it : nullptr;
}}

}}  // namespace

bool is_letter(char32_t c) {{ return find_range(kLetters, c) != nullptr; }}

bool is_number(char32_t c) {{ return find_range(kNumbers, c) != nullptr; }}

bool is_whitespace(char32_t c) {{ return find_range(kWhitespace, c) != nullptr; }}

std::uint8_t combining_class(char32_t c) {{
    const ClassRange* r = find_range(kCombiningClasses, c);
    return r == nullptr ? 0 : r->combining_class;
}}

void append_lowercase(char32_t c, std::u32string& out) {{
    const auto* it =
        std::lower_bound(std::begin(kLowercase), std::end(kLowercase), c,
                         [](const LowercaseMapping& m, char32_t value) {{ return m.from < value; }});
    if (it == std::end(kLowercase) || it->from != c) {{
        out.push_back(c);
        return;
    }}
    out.push_back(it->to);
    if (it->to_second != 0) out.push_back(it->to_second);
}}

std::u32string_view canonical_decomposition(char32_t c) {{
    const auto* it =
        std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), c,
                         [](const Decomposition& d, char32_t value) {{ return d.from < value; }});
    if (it == std::end(kDecompositions) || it->from != c) return {{}};
    return std::u32string_view(it->to, it->length);
}}

char32_t primary_composite(char32_t first, char32_t second) {{
    const auto* it = std::lower_bound(
        std::begin(kCompositions), std::end(kCompositions), Composition{{first, second, 0}},
        [](const Composition& a, const Composition& b) {{
            return a.first != b.first ? a.first < b.first : a.second < b.second;
        }});
    if (it == std::end(kCompositions) || it->first != first || it->second != second) return 0;
    return it->composite;
}}

}}  // namespace loom::unicode
"""
    args.out.write_text(text, encoding="utf-8")
    clang_format = shutil.which("clang-format") or shutil.which("clang-format-14")
    if clang_format:
        style = f"--style=file:{ROOT / '.clang-format'}"
        subprocess.run([clang_format, style, "-i", str(args.out)], check=True, cwd=ROOT)
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")


if __name__ == "__main__":
    main()
