#!/usr/bin/env python3
"""Ladder efficiency (issue 10): for a grid of device budgets, the throughput of the plan loom's
ladder ends on, divided by the throughput of the best plan that fits that budget, found by
trying every combination of the knobs.

The job: the bundled base model, 64x64 images, batch 4, gradient checkpointing off, low_vram
off, sampling off (sampling has its own rungs and is not a training-throughput question), on the
`sim` device. The knobs that keep what is trained (the effective batch, the buckets) are
searched exhaustively: gradient checkpointing (off, on) x micro-batch (4, 2, 1, with gradient
accumulation keeping 4 images per step) x low_vram level (0..3) = 24 plans.

  1. Every plan runs STEPS steps with room to spare, REPEATS times (a plan.yaml in its run
     folder sets it, the probe off): its peak device memory over the whole run — loading,
     caching and every step, weights included, what a budget must hold (the `stable` event's
     run-wide peak and the per-step `peak_allocated`) — and its throughput (1 / the median wall
     time between step ends after the first two), reported as the median and the spread
     (lowest..highest) of the repeats.
  2. The budgets: each distinct plan peak plus 1 % (the tightest budget each plan fits), the
     midpoint between every pair of neighbouring distinct peaks, and 10 random budgets between
     the lowest and the highest peak (seeded), so every step of the grid changes which plans fit.
  3. For each budget, loom trains the job fresh (the probe on, as by default) and ends on some
     plan (its plan.yaml). Efficiency = that plan's median throughput / the best plan's lowest
     repeat among the plans whose peak fits the budget; a plan whose repeats overlap the best
     one's counts as 1.0 (run-to-run spread is not the ladder's doing). The repeats are
     interleaved: every plan's first repeat, then every plan's second, and so on. Steps lost =
     steps asked - steps trained; recovery latency = the time from the run's first OOM, whatever
     its phase (the probe's included), to the end of the next training step, in the final plan's
     step times: what the OOM cost the user, the probe's start-up (its ladder and the measured
     choice before step 1) included. Its two parts are shown as well: the latency after a
     training-step OOM, and the probe's start-up = the time from the probe's first OOM to the
     end of step 1, less one step.

Two model sizes: the bundled base model ("tiny") and the benchmark UNet of bench/throughput.py
("small", SD 1.x's shape at 64/128/256 channels) on the same VAE and text encoder.

    bench/ladder_efficiency.py LOOM BASE_MODEL WORKDIR [STEPS=20] [REPEATS=3] [SIZES=tiny,small]
"""

import itertools
import json
import os
import random
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


def iso_seconds(text):
    import datetime
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def recovery_latency(events, metrics, phases=None):
    """From the first OOM in `phases` (None: any phase) to the end of the next step, in the
    run's median step times."""
    ooms = [e for e in events if e["event"] == "oom" and (phases is None or e.get("phase") in phases)]
    if not ooms or len(metrics) < 4:
        return None
    t = iso_seconds(ooms[0]["time"])
    after = [m["time"] for m in metrics if m["time"] >= t]
    return (after[0] - t) * throughput(metrics) if after else None


def startup_cost(events, metrics):
    """The probe's OOMs are answered before step 1 (measured choice included): from the first
    of them to the end of step 1, in step times, less the one step itself."""
    latency = recovery_latency(events, metrics, ("probe",))
    return None if latency is None else max(0.0, latency - 1.0)


def measure_grid(loom, work, model, steps, repeats):
    """Repeat r of every plan runs before repeat r+1 of any: a slow spell of the host then
    lands on one repeat of many plans instead of on every repeat of one plan."""
    plans = list(itertools.product((False, True), (4, 2, 1), (0, 1, 2, 3)))
    peaks = {key: [] for key in plans}
    rates = {key: [] for key in plans}
    for r in range(repeats):
        for gc, batch, level in plans:
            plan = PLAN.format(gc=str(gc).lower(), batch=batch, accum=EFFECTIVE_BATCH // batch,
                               level=level)
            key = (gc, batch, level)
            name = f"grid_gc{int(gc)}_b{batch}_l{level}_{r}"
            metrics, events, _ = train(loom, work, name, model, steps, "4GiB", False, plan=plan)
            peaks[key].append(max([m["peak_allocated"] for m in metrics] +
                                  [e["peak"] for e in events if e["event"] == "stable"]))
            rates[key].append(throughput(metrics))
    grid = {}
    for key in plans:
        grid[key] = {"peak": max(peaks[key]), "median": statistics.median(rates[key]),
                     "low": min(rates[key]), "high": max(rates[key])}
        g = grid[key]
        print(f"plan {describe(key)}: peak {g['peak'] / 2**20:.2f} MiB, {g['median']:.2f} it/s "
              f"({g['low']:.2f}..{g['high']:.2f})", flush=True)
    return grid


def efficiency(mine, best):
    """The ladder's plan against the best fitting plan: 1.0 when their repeats overlap (the
    run-to-run spread cannot tell them apart), else the ladder plan's median over the best
    plan's lowest repeat."""
    if mine["high"] >= best["low"]:
        return 1.0
    return mine["median"] / best["low"]


def budgets_of(grid, seed=7):
    peaks = sorted({g["peak"] for g in grid.values()})
    budgets = {int(p * 1.01) for p in peaks}
    budgets |= {int((a + b) / 2) for a, b in zip(peaks, peaks[1:])}
    rng = random.Random(seed)
    budgets |= {rng.randint(peaks[0], int(peaks[-1] * 1.05)) for _ in range(10)}
    return sorted(budgets)


def run_size(loom, work, model, label, steps, repeats):
    add_images(os.path.join(work, "data"), 8, 64)
    grid = measure_grid(loom, work, model, steps, repeats)
    budgets = budgets_of(grid)
    print(f"\n{label}: {len(budgets)} budgets, {steps} steps, {repeats} repeats per plan; job: "
          f"batch {EFFECTIVE_BATCH}, checkpointing off, low_vram 0")
    print("| budget | loom ends on | OOMs | steps lost | recovery latency | of it: step-OOM "
          "latency | probe start-up | loom plan it/s (spread) | best fitting plan | its it/s "
          "(spread) | efficiency |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    efficiencies, lost_total, totals, latencies, startups = [], 0, [], [], []
    for budget in budgets:
        fitting = {k: v for k, v in grid.items() if v["peak"] <= budget}
        name = f"budget_{budget}"
        metrics, events, final = train(loom, work, name, model, steps, f"{budget // 1024}KiB",
                                       True, fresh=True, may_not_fit=True)
        if metrics is None:
            if fitting:
                efficiencies.append(0.0)
            print(f"| {budget / 2**20:.2f} MiB | does not fit ({final}) | - | all | - | - | - | - | "
                  f"{'none fits' if not fitting else describe(max(fitting, key=lambda k: fitting[k]['median']))}"
                  f" | - | {'-' if not fitting else '**0.00**'} |", flush=True)
            continue
        best = max(fitting, key=lambda k: fitting[k]["median"])
        key = plan_key(final)
        ooms = sum(1 for e in events if e["event"] == "oom")
        trained = len({m["step"] for m in metrics})
        lost_total += steps - trained
        total = recovery_latency(events, metrics)
        if total is not None:
            totals.append(total)
        latency = recovery_latency(events, metrics, ("train_step",))
        if latency is not None:
            latencies.append(latency)
        startup = startup_cost(events, metrics)
        if startup is not None:
            startups.append(startup)
        mine = grid.get(key)
        ratio = efficiency(mine, fitting[best]) if mine else float("nan")
        if mine:
            efficiencies.append(ratio)
        print(f"| {budget / 2**20:.2f} MiB | {describe(key)} | {ooms} | {steps - trained} | "
              f"{'-' if total is None else f'{total:.2f}'} | "
              f"{'-' if latency is None else f'{latency:.2f}'} | "
              f"{'-' if startup is None else f'{startup:.1f}'} | "
              f"{mine['median']:.2f} ({mine['low']:.2f}..{mine['high']:.2f}) | {describe(best)} | "
              f"{fitting[best]['median']:.2f} ({fitting[best]['low']:.2f}.."
              f"{fitting[best]['high']:.2f}) | **{ratio:.2f}** |", flush=True)
    if efficiencies:
        print(f"\n{label}: efficiency lowest {min(efficiencies):.2f}, median "
              f"{statistics.median(efficiencies):.2f} over {len(efficiencies)} budgets; steps "
              f"lost {lost_total}; recovery latency from the first OOM (the probe's included): "
              + (f"median {statistics.median(totals):.1f}, at most {max(totals):.1f} step-times"
                 if totals else "no OOM")
              + "; after a training-step OOM: "
              + (f"at most {max(latencies):.2f} step-times" if latencies else
                 "no budget had one (the probe answered every OOM before step 1)")
              + (f"; the probe's start-up cost (its OOMs and measurements before step 1): "
                 f"median {statistics.median(startups):.1f}, at most {max(startups):.1f} "
                 f"step-times" if startups else ""))


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    loom, model, work = sys.argv[1:4]
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    repeats = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    sizes = (sys.argv[6] if len(sys.argv) > 6 else "tiny,small").split(",")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    os.environ["LOOM_HOME"] = os.path.join(work, "home")  # no stable plans from elsewhere
    for label in sizes:
        if label == "small":
            from throughput import make_small_model
            size_model = os.path.join(work, "small-model")
            make_small_model(model, size_model)
        else:
            size_model = model
        run_size(loom, os.path.join(work, label), size_model, label, steps, repeats)


if __name__ == "__main__":
    main()
