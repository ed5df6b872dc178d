#!/usr/bin/env python3
"""Step peaks per low_vram level at real width (issue 64): `loom train` on the Flux.1-dev-width
folder of make_real_width_flux.py, on `sim` with room to spare (64 GiB, probe off), each level
from a plan.yaml that sets it, gradient checkpointing on, batch 1 at 128 px, LoRA rank 16, bf16,
text embeddings cached, sampling off, 2 steps. Several loom builds can be given; each level runs
on each build in turn, so the figures sit side by side.

Printed per build and level: the largest per-step `peak_allocated` of metrics.jsonl (a step's own
peak, weights included), `allocated` after the last step (what the run holds between steps), and
the last step's seconds (CPU; the sim clock does not model copies).

    real_width_peaks.py MODEL_DIR WORK LEVELS LOOM [LOOM...]      e.g. LEVELS=0,2,3
"""
import json
import os
import shutil
import subprocess
import sys

import loom_job
from tiny_data import add_images


def run(loom, model, work, tag, level):
    name = f"{tag}_level{level}"
    run_dir = os.path.join(work, "runs", name)
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    loom_job.write_level_plan(run_dir, level)
    job = os.path.join(work, name + ".yaml")
    with open(job, "w") as f:
        f.write(loom_job.job_yaml(name, work, "sim", 5, 16, 1000, f"""      datasets:
        - folder_path: {work}/data
          resolution: [128]
          cache_latents_to_disk: true
      train: {{steps: 2, lr: 1e-4, batch_size: 1, gradient_checkpointing: true, dtype: bf16,
              cache_text_embeddings: true, disable_sampling: true}}
      model: {{name_or_path: {model}, arch: flux}}
      oom: {{vram_limit: 64GiB, probe: false}}
"""))
    out = subprocess.run([loom, "train", job, "--no-supervise"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{name} failed:\n{out.stderr[-3000:]}")
    metrics = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    return (max(m["peak_allocated"] for m in metrics), metrics[-1]["allocated"],
            metrics[-1]["step_seconds"])


def main():
    model, work, levels, looms = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    os.makedirs(work, exist_ok=True)
    os.environ["LOOM_HOME"] = os.path.join(work, "home")  # no stable plans from elsewhere
    add_images(os.path.join(work, "data"), 2, 128)
    print("Flux.1-dev width (3072), 2 double + 4 single blocks, batch 1 at 128 px, checkpointing")
    print(f"{'build':40} {'level':>5} {'step peak':>12} {'held':>12} {'step s':>8}")
    for level in (int(x) for x in levels.split(",")):
        for i, loom in enumerate(looms):
            peak, held, seconds = run(loom, model, work, f"b{i}", level)
            print(f"{loom:40} {level:5} {peak / 2**30:8.3f} GiB {held / 2**30:8.3f} GiB "
                  f"{seconds:8.1f}", flush=True)


if __name__ == "__main__":
    main()
