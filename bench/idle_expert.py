"""The idle expert on the host (issue 39): what Wan 2.2's free rung saves and what it costs, on
the simulated device, with the tiny two-expert WanPipeline of tests/parity/wan_reference.py.

The same job runs twice from a plan.yaml that sets `model.idle_expert_on_host` off, then on:
both experts train, `train.switch_boundary_every` S (1: an expert switch every step, the worst
case; ai-toolkit's example uses 10), batch 1, no previews. Resident: the largest `allocated`
at a step's end in metrics.jsonl (frozen weights, LoRA, optimizer state: what the idle expert
frees). Peak: the run's `peak_allocated` (on a model this tiny it is set by the VAE encoding the
64x64 images and the step's activations, not by the weights, so it moves little). Step time: the median `step_seconds` after
the first two steps. The switch's cost on sim is a host memcpy of one expert's frozen weights;
on a GPU it is one expert's bytes over PCIe per switch, which this machine cannot measure.

    bench/idle_expert.py LOOM WAN22_PIPELINE WORKDIR [STEPS] [SWITCH_EVERY]
"""

import json
import os
import shutil
import statistics
import subprocess
import sys

import loom_job
from tiny_data import add_images

PLAN = """train: {{gradient_checkpointing: false, batch_size: 1, gradient_accumulation: 1}}
datasets: {{max_bucket_pixels: null, num_frames: 1}}
model: {{low_vram: 0, idle_expert_on_host: {idle}, qtype: qfloat8, qtype_te: ~}}
sample: {{enabled: false, width: 64, height: 64, batch_prompts: true, batch_guidance: true, num_frames: 1}}
host: {{memory_caches: true, threads: 0}}
"""


def run(loom, model, work, idle, steps, switch_every):
    name = "idle_on" if idle else "idle_off"
    folder = os.path.join(work, "runs", name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    with open(os.path.join(folder, "plan.yaml"), "w") as f:
        f.write(PLAN.format(idle="true" if idle else "false"))
    rest = f"""      datasets:
        - {{folder_path: {work}/data, caption_ext: txt, resolution: [64], num_frames: 1}}
      train: {{batch_size: 1, steps: {steps}, lr: 1e-3, optimizer: adamw, noise_scheduler: flowmatch,
              switch_boundary_every: {switch_every}, disable_sampling: true, dtype: fp32}}
      model: {{name_or_path: {model}, arch: wan22_14b,
              model_kwargs: {{train_high_noise: true, train_low_noise: true}}}}
      oom: {{vram_limit: 1GiB, probe: false}}
"""
    job = os.path.join(work, name + ".yaml")
    with open(job, "w") as f:
        f.write(loom_job.job_yaml(name, work, "sim", 3, 4, steps + 1, rest))
    subprocess.run([loom, "train", job, "--no-supervise"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    metrics = [json.loads(line) for line in open(os.path.join(folder, "metrics.jsonl"))]
    resident = max(m["allocated"] for m in metrics)
    peak = max(m["peak_allocated"] for m in metrics)
    step = statistics.median(m["step_seconds"] for m in metrics[2:])
    return resident, peak, step


def main(loom, model, work, steps=12, switch_every=1):
    os.makedirs(work, exist_ok=True)
    add_images(os.path.join(work, "data"), 4, 64)
    off = run(loom, model, work, False, steps, switch_every)
    on = run(loom, model, work, True, steps, switch_every)
    kib = 1024.0
    print(f"switch_boundary_every {switch_every}, {steps} steps, batch 1, 64x64")
    print("| idle expert | resident | ratio | run peak | ratio | median step | ratio |")
    print("|---|---|---|---|---|---|---|")
    for label, (resident, peak, step) in (("on the device", off), ("on the host", on)):
        print(f"| {label} | {resident / kib:.1f} KiB | {resident / off[0]:.3f} | "
              f"{peak / kib:.1f} KiB | {peak / off[1]:.3f} | "
              f"{step * 1000:.1f} ms | {step / off[2]:.2f} |")


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) < 3:
        sys.exit(__doc__)
    main(args[0], args[1], args[2], *(int(a) for a in args[3:]))
