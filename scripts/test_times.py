#!/usr/bin/env python3
"""Each test's time from CTest's last run, slowest first (docs/TESTING.md).

    scripts/test_times.py [BUILD_DIR] [--top N] [--markdown]

Reads BUILD_DIR/Testing/Temporary/LastTest.log (default build/), which every `ctest` run writes.
"""
import argparse
import os
import re
import sys


def read(log):
    tests, name = [], None
    with open(log, errors="replace") as f:
        for line in f:
            m = re.match(r'^\d+/\d+ Test: (.+)$', line)
            if m:
                name = m.group(1).strip()
            m = re.match(r'^Test time = +([\d.]+) sec', line)
            if m and name:
                tests.append([name, float(m.group(1)), "?"])
            m = re.match(r'^Test (Passed|Failed|Not Run)\.?', line)
            if m and tests and tests[-1][0] == name:
                tests[-1][2] = m.group(1).lower()
    return tests


def main():
    p = argparse.ArgumentParser()
    p.add_argument("build", nargs="?", default="build")
    p.add_argument("--top", type=int, default=0)
    p.add_argument("--markdown", action="store_true")
    a = p.parse_args()
    log = os.path.join(a.build, "Testing", "Temporary", "LastTest.log")
    if not os.path.exists(log):
        sys.exit(f"no {log}: run ctest first")
    tests = sorted(read(log), key=lambda t: -t[1])
    total = sum(t[1] for t in tests)
    shown = tests[:a.top] if a.top else tests
    if a.markdown:
        print("| test | seconds | share |")
        print("|---|---:|---:|")
        for name, s, _ in shown:
            print(f"| `{name}` | {s:.1f} | {100 * s / total:.1f}% |")
    else:
        print(f"Per-test times of the last ctest run ({len(tests)} tests, {total:.0f} s in all):")
        for name, s, status in shown:
            print(f"  {s:8.1f} s  {name}{'' if status == 'passed' else '  (' + status + ')'}")


if __name__ == "__main__":
    main()
