#!/usr/bin/env python3
"""Ladder efficiency (issue 10): for a grid of device budgets, the throughput of the plan loom's
ladder ends on, divided by the throughput of the best plan that fits that budget, found by
trying every combination of the knobs.

The job: the bundled base model, 64x64 images, batch 4, gradient checkpointing off, low_vram
off, sampling off (sampling has its own rungs and is not a training-throughput question), on the
`sim` device. The knobs that keep what is trained (the effective batch, the buckets) are
searched exhaustively: gradient checkpointing (off, on) x micro-batch (4, 2, 1, with gradient
accumulation keeping 4 images per step) x low_vram level (0..3) = 24 plans.

  1. Every plan runs STEPS steps with room to spare (a plan.yaml in its run folder sets it, the
     probe off): its peak device memory over the whole run — loading, caching and every step,
     weights included, what a budget must hold (the `stable` event's run-wide peak and the
     per-step `peak_allocated`) — and its throughput (1 / the median wall time between step
     ends after the first two).
  2. The budgets: each distinct plan peak plus 1 % (the tightest budget each plan fits), so every
     step of the grid changes which plans fit.
  3. For each budget, loom trains the job fresh (the probe on, as by default) and ends on some
     plan (its plan.yaml). Efficiency = that plan's throughput from step 1 / the best throughput
     among the plans whose peak fits the budget. Steps lost = steps asked - steps trained.

    bench/ladder_efficiency.py LOOM BASE_MODEL WORKDIR [STEPS=10]
"""

import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys

import yaml

import loom_job
from tiny_data import add_images

PLAN = """train: {{gradient_checkpointing: {gc}, batch_size: {batch}, gradient_accumulation: {accum}}}
datasets: {{max_bucket_pixels: null, num_frames: 1}}
model: {{low_vram: {level}}}
sample: {{enabled: false, width: 64, height: 64, batch_prompts: true, batch_guidance: true, num_frames: 1}}
host: {{memory_caches: true, threads: 0}}
"""

EFFECTIVE_BATCH = 4


def job_yaml(work, name, model, steps, vram, probe):
    return loom_job.job_yaml(name, work, "sim", 3, 8, 1000000, f"""      datasets:
        - folder_path: {work}/data
          resolution: [64]
          cache_latents: true
      train: {{steps: {steps}, lr: 1e-4, batch_size: {EFFECTIVE_BATCH},
              gradient_checkpointing: false, disable_sampling: true}}
      model: {{name_or_path: {model}, arch: sd1}}
      sample: {{prompts: ['x']}}
      oom: {{vram_limit: {vram}, probe: {str(probe).lower()}, reuse_stable: "off"}}
""")


def train(loom, work, name, model, steps, vram, probe, plan=None, fresh=False, may_not_fit=False):
    run = os.path.join(work, "runs", name)
    shutil.rmtree(run, ignore_errors=True)
    os.makedirs(run)
    if plan is not None:
        with open(os.path.join(run, "plan.yaml"), "w") as f:
            f.write(plan)
    job = os.path.join(work, name + ".yaml")
    with open(job, "w") as f:
        f.write(job_yaml(work, name, model, steps, vram, probe))
    cmd = [loom, "train", job, "--no-supervise"] + (["--fresh"] if fresh else [])
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode == 4 and may_not_fit:  # "does not fit": every rung tried
        return None, None, out.stderr.strip().splitlines()[-1]
    if out.returncode != 0:
        sys.exit(f"{name} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    metrics = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
    events = [json.loads(l) for l in open(os.path.join(run, "events.jsonl"))]
    with open(os.path.join(run, "plan.yaml")) as f:
        final = yaml.safe_load(f)
    return metrics, events, final


def throughput(metrics):
    times = [m["time"] for m in metrics]
    return 1.0 / statistics.median(b - a for a, b in zip(times[2:], times[3:]))


def plan_key(plan):
    return (bool(plan["train"]["gradient_checkpointing"]), int(plan["train"]["batch_size"]),
            int(plan["model"]["low_vram"]))


def describe(key):
    gc, batch, level = key
    return (f"{'checkpointing' if gc else 'no checkpointing'}, batch {batch} x "
            f"{EFFECTIVE_BATCH // batch}, low_vram {level}")


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    loom, model, work = sys.argv[1:4]
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    os.environ["LOOM_HOME"] = os.path.join(work, "home")  # no stable plans from elsewhere
    add_images(os.path.join(work, "data"), 8, 64)

    grid = {}
    for gc, batch, level in itertools.product((False, True), (4, 2, 1), (0, 1, 2, 3)):
        plan = PLAN.format(gc=str(gc).lower(), batch=batch, accum=EFFECTIVE_BATCH // batch,
                           level=level)
        name = f"grid_gc{int(gc)}_b{batch}_l{level}"
        metrics, events, _ = train(loom, work, name, model, steps, "4GiB", False, plan=plan)
        key = (gc, batch, level)
        peak = max([m["peak_allocated"] for m in metrics] +
                   [e["peak"] for e in events if e["event"] == "stable"])
        grid[key] = (peak, throughput(metrics))
        print(f"plan {describe(key)}: peak {grid[key][0] / 2**20:.2f} MiB, "
              f"{grid[key][1]:.2f} it/s", flush=True)

    budgets = []
    for peak in sorted({p for p, _ in grid.values()}):
        budget = int(peak * 1.01)
        if not budgets or budget > budgets[-1] * 1.02:  # near-equal peaks: one budget
            budgets.append(budget)

    print(f"\n{len(budgets)} budgets, {steps} steps each, job: batch {EFFECTIVE_BATCH}, "
          "checkpointing off, low_vram 0")
    print("| budget | loom ends on | OOMs | steps lost | loom plan it/s | best fitting plan | "
          "best it/s | efficiency |")
    print("|---|---|---|---|---|---|---|---|")
    efficiencies = []
    for budget in budgets:
        name = f"budget_{budget}"
        metrics, events, final = train(loom, work, name, model, steps, f"{budget // 1024}KiB",
                                       True, fresh=True, may_not_fit=True)
        fitting = {k: v for k, v in grid.items() if v[0] <= budget}
        best = max(fitting, key=lambda k: fitting[k][1])
        if metrics is None:  # loom gave up where some plan fits: efficiency 0
            efficiencies.append(0.0)
            print(f"| {budget / 2**20:.2f} MiB | does not fit ({final}) | - | all | 0 | "
                  f"{describe(best)} | {fitting[best][1]:.2f} | **0.00** |", flush=True)
            continue
        key = plan_key(final)
        ooms = sum(1 for e in events if e["event"] == "oom")
        trained = len({m["step"] for m in metrics})
        if key in grid:
            ratio = grid[key][1] / fitting[best][1]
            efficiencies.append(ratio)
            mine = f"{grid[key][1]:.2f}"
        else:
            ratio, mine = float("nan"), "outside the grid"
        print(f"| {budget / 2**20:.2f} MiB | {describe(key)} | {ooms} | {steps - trained} | "
              f"{mine} | {describe(best)} | {fitting[best][1]:.2f} | **{ratio:.2f}** |",
              flush=True)
    if efficiencies:
        print(f"\nefficiency: lowest {min(efficiencies):.2f}, median "
              f"{statistics.median(efficiencies):.2f} over {len(efficiencies)} budgets")


if __name__ == "__main__":
    main()
