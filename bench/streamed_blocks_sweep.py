#!/usr/bin/env python3
"""Streamed blocks at real width (issue 64): does the ladder land on the fastest block count that
fits? On `sim`, for a model folder (make_real_width_flux.py's Flux.1-dev width), batch 1 at 128 px (SWEEP_RESOLUTION),
gradient checkpointing, LoRA rank 16, bf16, text embeddings cached, sampling off:

1. Every count by hand: level 2 (no block streams) and level 3 with N = 1 .. all blocks streaming
   (oom.streamed_blocks), one step each on a roomy budget: the step's peak and its time by the
   modelled clock (metrics.jsonl's modelled_seconds: traffic, launches and host copies).
2. A sweep of budgets from "all resident" down to the smallest that trains: one above level 2's
   peak, then one midway between each count's peak and the next's. Each run starts at level 2
   with the probe on, so the ladder (and the measured choice) picks the count: the plan it lands
   on, its step peak and modelled time, and the best count by hand that fits the budget.

Printed: the by-hand table, then per budget the landed count against the smallest fitting count
(within one block?) and its modelled time against the best fitting count's (the ratio, ≥ 0.9?),
with the steps lost (steps asked − steps trained).

    streamed_blocks_sweep.py MODEL_DIR WORK LOOM [BLOCKS] [STEPS]    BLOCKS: the denoiser's blocks
"""
import json
import os
import shutil
import subprocess
import sys

import loom_job
from tiny_data import add_images


RESOLUTION = int(os.environ.get("SWEEP_RESOLUTION", "128"))


def job(work, name, model, oom, steps):
    return loom_job.job_yaml(name, work, "sim", 5, 16, 1000, f"""      datasets:
        - folder_path: {work}/data
          resolution: [{RESOLUTION}]
          cache_latents_to_disk: true
      train: {{steps: {steps}, lr: 1e-4, batch_size: 1, gradient_checkpointing: true, dtype: bf16,
              cache_text_embeddings: true, disable_sampling: true}}
      model: {{name_or_path: {model}, arch: flux}}
      oom: {{{oom}}}
""")


def run(loom, work, name, model, oom, steps):
    run_dir = os.path.join(work, "runs", name)
    shutil.rmtree(run_dir, ignore_errors=True)
    path = os.path.join(work, name + ".yaml")
    with open(path, "w") as f:
        f.write(job(work, name, model, oom, steps))
    out = subprocess.run([loom, "train", path, "--fresh", "--no-supervise"], capture_output=True,
                         text=True)
    metrics_file = os.path.join(run_dir, "metrics.jsonl")
    metrics = [json.loads(x) for x in open(metrics_file)] if os.path.exists(metrics_file) else []
    plan = open(os.path.join(run_dir, "plan.yaml")).read() if metrics else ""
    return out.returncode, metrics, plan, (out.stdout + out.stderr)[-2000:]


def plan_count(plan_text, blocks):
    """The blocks the plan streams: 0 below level 3, `blocks` for streamed_blocks 0 at level 3."""
    level = int(plan_text.split("low_vram:")[1].split()[0])
    count = int(plan_text.split("streamed_blocks:")[1].split()[0]) if "streamed_blocks" in plan_text else 0
    if level < 3:
        return 0
    return blocks if count == 0 else count


def main():
    model, work, loom = sys.argv[1], sys.argv[2], sys.argv[3]
    blocks = int(sys.argv[4]) if len(sys.argv) > 4 else 6
    steps = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    os.makedirs(work, exist_ok=True)
    os.environ["LOOM_HOME"] = os.path.join(work, "home")  # no stable plans from elsewhere
    add_images(os.path.join(work, "data"), 2, RESOLUTION)

    by_hand = {}  # count -> (peak, modelled seconds)
    # WORK/by_hand.json keeps the table: a rerun of the budgets on another build reads it
    # (SWEEP_REUSE=1) instead of training every count again.
    table = os.path.join(work, "by_hand.json")
    if os.environ.get("SWEEP_REUSE") == "1" and os.path.exists(table):
        by_hand = {int(k): tuple(v) for k, v in json.load(open(table)).items()}
    print(f"{'count':>6} {'step peak':>12} {'held':>12} {'modelled s/step':>16}", flush=True)
    for count in range(0, blocks + 1):
        if count in by_hand:
            print(f"{count:6} {by_hand[count][0] / 2**30:8.3f} GiB {'':>12} "
                  f"{by_hand[count][1]:16.3f}  (from {table})", flush=True)
            continue
        oom = ("probe: false, reuse_stable: \"off\", vram_limit: 64GiB, "
               + ("low_vram_level: 2" if count == 0 else
                  f"low_vram_level: 3, streamed_blocks: {count}"))
        rc, metrics, _, tail = run(loom, work, f"n{count}", model, oom, steps)
        if rc != 0 or not metrics:
            sys.exit(f"count {count} failed:\n{tail}")
        peak = max(m["peak_allocated"] for m in metrics)
        seconds = metrics[-1]["modelled_seconds"]
        by_hand[count] = (peak, seconds)
        held = metrics[-1]["allocated"]
        print(f"{count:6} {peak / 2**30:8.3f} GiB {held / 2**30:8.3f} GiB {seconds:16.3f}",
              flush=True)
        json.dump(by_hand, open(table, "w"))

    budgets = [int(by_hand[0][0] * 1.05)]
    counts = sorted(by_hand)
    for a, b in zip(counts, counts[1:]):
        budgets.append((by_hand[a][0] + by_hand[b][0]) // 2)
    print(f"\n{'budget':>10} {'landed':>7} {'smallest':>9} {'best':>5} {'ratio':>6} {'lost':>5}"
          f" {'peak':>10}", flush=True)
    below = float(os.environ.get("SWEEP_BELOW", "inf"))  # only the budgets under this (bytes)
    for budget in sorted(set(budgets), reverse=True):
        if budget >= below:
            continue
        fitting = [c for c, (peak, _) in by_hand.items() if peak <= budget]
        if not fitting:
            continue
        smallest = min(fitting)
        best = min(fitting, key=lambda c: by_hand[c][1])
        oom = f"probe: true, reuse_stable: \"off\", vram_limit: {budget // 1024}KiB, low_vram_level: 2"
        rc, metrics, plan, tail = run(loom, work, f"budget_{budget}", model, oom, steps)
        if rc != 0 or not metrics:
            print(f"{budget / 2**30:6.3f} GiB  failed: {tail[-300:]!r}", flush=True)
            continue
        landed = plan_count(plan, blocks)
        ratio = by_hand[best][1] / metrics[-1]["modelled_seconds"]
        print(f"{budget / 2**30:6.3f} GiB {landed:7} {smallest:9} {best:5} {ratio:6.2f} "
              f"{steps - len(metrics):5} {max(m['peak_allocated'] for m in metrics) / 2**30:6.3f} GiB",
              flush=True)


if __name__ == "__main__":
    main()
