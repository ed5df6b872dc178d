#!/usr/bin/env python3
"""`loom report` on the runs issue 24 names: a run with no step yet, a run that failed at load,
and 100,000 steps of metrics (with OOMs and plan changes in the middle) — the wall time of
`loom report` (median of REPEATS, the spread shown) and the HTML file's size. The folders are
written by this script in the shape `loom train` writes them (events.jsonl, metrics.jsonl).

    bench/report_speed.py LOOM WORKDIR [REPEATS=5]
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import time

START = {"event": "start", "device": "sim (simulated accelerator, budget 16.00 MiB)",
         "total": 16 << 20, "fresh": True, "plan": "gradient_checkpointing false, batch 4 x 1",
         "time": "2026-12-01T10:00:00.000Z"}


def write_run(folder, events, steps):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "events.jsonl"), "w") as f:
        for e in events:
            f.write(json.dumps(e) + "\n")
    with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
        for s in range(1, steps + 1):
            f.write(json.dumps({"allocated": 9e6, "loss": 0.1 + (5.0 if s % 9973 == 0 else 0.0),
                                "lr": 1e-4, "peak_allocated": 1.2e7, "step": s,
                                "step_seconds": 0.05, "time": 1796119200 + s * 0.05}) + "\n")


def main():
    loom, work = sys.argv[1], sys.argv[2]
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    shutil.rmtree(work, ignore_errors=True)
    oom = {"event": "oom", "phase": "load", "step": None, "kind": "device", "peak": 16e6,
           "message": "sim out of memory. Tried to allocate 1.00 KiB", "time": "2026-12-01T10:00:01.000Z"}
    change = {"event": "change", "phase": "load", "step": None, "rule": "load.low_vram",
              "reason": "r", "changes": [{"knob": "model.low_vram", "from": "0", "to": "1"}],
              "plan": "p", "time": "2026-12-01T10:00:01.001Z"}
    runs = {
        "no step yet": ([START], 0),
        "failed at load": ([START, oom, change, dict(oom, time="2026-12-01T10:00:02.000Z"),
                            {"event": "does_not_fit", "phase": "load", "rule": "load.low_vram",
                             "reason": "does not fit: every rung was tried",
                             "time": "2026-12-01T10:00:03.000Z"}], 0),
        "100,000 steps": ([START] + [dict(oom, phase="train_step", step=s,
                                          time=f"2026-12-01T11:{s // 2000:02d}:00.000Z")
                                     for s in (20000, 50000, 80000)] +
                          [dict(change, phase="train_step", step=s, rule="train.gradient_checkpointing",
                                time=f"2026-12-01T11:{s // 2000:02d}:00.001Z")
                           for s in (20000, 50000, 80000)], 100000),
    }
    print("| run | `loom report` wall time, median (spread) | report.html |")
    print("|---|---|---|")
    for name, (events, steps) in runs.items():
        folder = os.path.join(work, name.replace(" ", "_").replace(",", ""))
        write_run(folder, events, steps)
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            subprocess.run([loom, "report", folder, "--store", os.path.join(work, "none.db")],
                           check=True, stdout=subprocess.DEVNULL)
            times.append(time.perf_counter() - t)
        size = os.path.getsize(os.path.join(folder, "report.html"))
        print(f"| {name} | {statistics.median(times):.3f} s ({min(times):.3f}..{max(times):.3f}) | "
              f"{size / 1024:.0f} KiB |")


if __name__ == "__main__":
    main()
