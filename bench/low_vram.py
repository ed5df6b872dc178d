"""low_vram sub-modes on the simulated device (issue 7): peak device memory and step time of each
level against the plain plan, same model, same data, same batch, and the difference level 2's
quantized base weights (qfloat8 since issue 21; bf16 before) make to what is trained.

Each level runs the same job from a run folder whose plan.yaml sets `model.low_vram` to that
level (gradient checkpointing on, batch 1, as the ladder has them when it reaches low_vram).
Peak: the largest per-step `peak_allocated` in metrics.jsonl (a step's own peak, weights
included). Step time: the median `step_seconds` after the first two steps. The quantization difference:
the largest relative difference of the per-step loss, and the largest absolute difference of the
final LoRA weights, between level 1 (float32 base) and level 2 (qfloat8 base).

    bench/low_vram.py LOOM MAKE_TINY_FIXTURE WORKDIR [STEPS] [SIZE]
"""

import json
import os
import shutil
import statistics
import subprocess
import sys

import numpy as np

import loom_job
from tiny_data import add_images
from safetensors.numpy import load_file



def run_level(loom, work, level, steps, size):
    name = f"level{level}"
    run = os.path.join(work, "runs", name)
    shutil.rmtree(run, ignore_errors=True)
    os.makedirs(run)
    loom_job.write_level_plan(run, level)
    job = os.path.join(work, name + ".yaml")
    with open(job, "w") as f:
        f.write(loom_job.job_yaml(name, work, "sim", 5, 4, 1000, f"""      datasets:
        - folder_path: {work}/data
          resolution: [{size}]
          cache_latents: true
      train: {{steps: {steps}, lr: 1e-3, batch_size: 1, gradient_checkpointing: true,
              disable_sampling: true}}
      model: {{name_or_path: {work}/fixture/model, arch: sd1}}
      oom: {{vram_limit: 4GiB, probe: false}}
"""))
    out = subprocess.run([loom, "train", job, "--no-supervise"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"level {level} failed:\n{out.stderr[-2000:]}")
    metrics = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
    peak = max(m["peak_allocated"] for m in metrics)
    step = statistics.median(m["step_seconds"] for m in metrics[2:])
    return peak, step, [m["loss"] for m in metrics], os.path.join(run, name + ".safetensors")


def main():
    loom, fixture, work = sys.argv[1:4]
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 12
    size = int(sys.argv[5]) if len(sys.argv) > 5 else 64
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    # A stable-config store of the benchmark's own: every run must meet its OOMs, not start
    # from plans an earlier run (or the user's jobs) recorded.
    os.environ["LOOM_HOME"] = os.path.join(work, "home")
    subprocess.run([fixture, os.path.join(work, "fixture")], check=True, capture_output=True)
    add_images(os.path.join(work, "data"), 4, size)
    names = {0: "plain (checkpointing, batch 1)", 1: "1 encoders on the host",
             2: "2 + qfloat8 base weights", 3: "3 + block streaming"}
    results = {level: run_level(loom, work, level, steps, size) for level in range(4)}
    base_peak, base_step = results[0][0], results[0][1]
    print(f"tiny SD model, {size}x{size} images, batch 1, gradient checkpointing, {steps} steps")
    print(f"{'low_vram level':34} {'peak':>12} {'vs plain':>9} {'step':>9} {'vs plain':>9}")
    for level, (peak, step, _, _) in results.items():
        print(f"{names[level]:34} {peak / 2**20:9.2f} MiB {peak / base_peak:9.3f} "
              f"{step * 1000:6.0f} ms {step / base_step:9.3f}")
    loss1, loss2 = results[1][2], results[2][2]
    rel = max(abs(a - b) / abs(a) for a, b in zip(loss1, loss2))
    a, b = load_file(results[1][3]), load_file(results[2][3])
    weights = [k for k in a if k.endswith(".weight")]  # lora_up / lora_down, not the alphas
    lora = max(float(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)).max())
               for k in weights)
    scale = max(float(np.abs(a[k]).max()) for k in weights)
    print(f"qfloat8 base weights vs float32 (levels 2 vs 1): largest relative loss difference "
          f"{rel:.2e}; largest LoRA weight difference {lora:.2e} (largest weight {scale:.2e})")


if __name__ == "__main__":
    main()
