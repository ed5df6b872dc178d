#!/usr/bin/env python3
"""Data-parallel scaling on the CPU (issue 23): one process against `loom train --nproc 2` at the
same global batch, on the small UNet of bench/throughput.py (SD 1.x's block layout at 64/128/256
channels) and the bundled tiny one, one thread per rank.

Runs, interleaved over the rounds so drift on the machine hits all of them:
  1 process, batch G, 1 thread     — the reference: what one rank's core does alone
  a group of 1 rank, batch G        — the same process through the data-parallel path (RANK=0,
                                      WORLD_SIZE=1): the agreement after every attempt, the
                                      exchange buffer, the undo copy, with no other rank to wait
                                      for — the per-step agreement's own cost
  2 ranks, batch G/2 each, 1 thread — the same global batch on two cores
  1 process, batch G, 2 threads    — the same two cores used by intra-op threading instead

Figures per run (medians over the rounds): it/s (1 / the median gap between consecutive step
ends in metrics.jsonl, steps 3..N), the step's `sync` phase (asking the group whether every rank
got through its backward pass, the gradients' and loss's all-reduce and the host copy that can
undo the update, waiting for the slower rank included), and its share of the step. The report
gives the ratios to the 1-process 1-thread run, and the largest difference of the final LoRAs
from it (they train the same global batch, so they must agree to float rounding).

    bench/dist_scaling.py LOOM BASE_MODEL WORKDIR [ROUNDS=3] [STEPS=20]
"""

import json
import os
import shutil
import statistics
import subprocess
import sys

from safetensors.torch import load_file

from throughput import loom_job, make_small_model
from tiny_data import add_images

# name, resolution, global batch, LoRA rank
SIZES = [("tiny", 64, 4, 8), ("small", 128, 4, 8)]
# label, ranks (0: a group of one rank), threads per process
RUNS = [("1 process x 1 thread", 1, 1), ("group of 1 rank x 1 thread", 0, 1),
        ("2 ranks x 1 thread", 2, 1), ("1 process x 2 threads", 1, 2)]


def run(loom, work, name, ranks, threads, size_args, steps):
    job = os.path.join(work, name + ".yaml")
    args = dict(size_args, batch=size_args["batch"] // max(ranks, 1), steps=steps,
                threads=threads)
    with open(job, "w") as f:
        f.write(loom_job(work, name, **args))
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), LOOM_HOME=os.path.join(work, "home"))
    cmd = [loom, "train", job, "--fresh"] + (["--nproc", str(ranks)] if ranks > 1 else [])
    if ranks == 0:  # rank 0 of 1, as torchrun would start it
        env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(29000 + os.getpid() % 2000))
    with open(os.path.join(work, name + ".log"), "w") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    if rc != 0:
        sys.exit(f"loom failed ({rc}); see {work}/{name}.log")
    metrics = [json.loads(l) for l in open(os.path.join(work, "runs", name, "metrics.jsonl"))]
    gaps = [b["time"] - a["time"] for a, b in zip(metrics[2:], metrics[3:])]
    step = statistics.median(gaps)
    sync = statistics.median(m["phases"].get("sync", 0.0) for m in metrics[3:])
    lora = load_file(os.path.join(work, "runs", name, name + ".safetensors"))
    return {"it_s": 1.0 / step, "step": step, "sync": sync, "sync_share": sync / step,
            "lora": lora}


def max_diff(a, b):
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


def main():
    loom, base, work = sys.argv[1:4]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    steps = int(sys.argv[5]) if len(sys.argv) > 5 else 20
    loom = os.path.abspath(loom)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    data = os.path.join(work, "data")
    add_images(data, 8, 128)
    models = {"tiny": os.path.abspath(base), "small": os.path.join(work, "small_model")}
    make_small_model(base, models["small"])
    for size, resolution, batch, rank in SIZES:
        size_args = {"model": models[size], "data": data, "resolution": resolution,
                     "batch": batch, "rank": rank}
        results = {label: [] for label, _, _ in RUNS}
        for r in range(rounds):
            order = RUNS[r % len(RUNS):] + RUNS[:r % len(RUNS)]
            for label, ranks, threads in order:
                name = f"{size}_{ranks}r{threads}t_{r}"
                results[label].append(run(loom, work, name, ranks, threads, size_args, steps))
        ref = results[RUNS[0][0]]
        ref_it = statistics.median(x["it_s"] for x in ref)
        print(f"\n{size} UNet, {resolution} px, global batch {batch}, LoRA rank {rank}, "
              f"{steps} steps, {rounds} rounds")
        print(f"{'run':28} {'it/s':>7} {'ratio':>6} {'sync s/step':>12} {'sync share':>10} "
              f"{'LoRA max diff':>14}")
        for label, _, _ in RUNS:
            xs = results[label]
            it = statistics.median(x["it_s"] for x in xs)
            sync = statistics.median(x["sync"] for x in xs)
            share = statistics.median(x["sync_share"] for x in xs)
            diff = max(max_diff(ref[i]["lora"], xs[i]["lora"]) for i in range(len(xs)))
            print(f"{label:28} {it:7.3f} {it / ref_it:6.2f} {sync:12.4f} {share:10.1%} "
                  f"{diff:14.3g}")
        alone = statistics.median(x["step"] for x in ref)
        group = statistics.median(x["step"] for x in results[RUNS[1][0]])
        print(f"the agreement's cost, a group of 1 rank against the plain process: "
              f"{(group - alone) * 1000:+.1f} ms per step ({group / alone - 1:+.1%})")


if __name__ == "__main__":
    main()
