#!/usr/bin/env python3
"""loom against the Python reference (bench/reference_lora.py: diffusers UNet + peft LoRA) at
equal settings, interleaved on one machine, for two model sizes (issue 10).

Both sides train the same model folder on the same images at the same resolution, batch, steps,
LoRA rank and alpha, learning rate, AdamW (eps 1e-6, weight decay 0.01), gradient clipping at
1.0, cached latents and text embeddings, float32, on the CPU with the same thread count
(OMP_NUM_THREADS and the framework's own setting). loom runs with its defaults otherwise — the
OOM guard on, the pre-flight probe included — because that is what a user runs.

Per process:
  * throughput: 1 / the median wall time between consecutive step ends (metrics.jsonl's `time`
    for loom, the reference's step lines), steps 3..N: everything between two steps counts
    (data, logging, metrics, the guard), not only the step's own compute;
  * time to first step: launch to the end of step 1 (model loading, caching, loom's probe);
  * peak RSS: the process's ru_maxrss (os.wait4), the same measure for both sides.

Rounds alternate which side runs first, so drift on the machine hits both. The report gives each
figure's median over the rounds and the ratio loom / reference (for time and memory, the
reference's figure over loom's, so above 1 means loom is better everywhere).

    bench/throughput.py LOOM BASE_MODEL WORKDIR [ROUNDS=3] [STEPS=30] [THREADS=2]
"""

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

from safetensors import safe_open

from loom_job import job_yaml
from tiny_data import add_images

HERE = os.path.dirname(os.path.abspath(__file__))

# name, resolution, batch, rank: the bundled base at its own size, and a UNet of SD 1.x's shape
# (64/128/256 channels, 2 layers per block, 17.7M parameters) on the same VAE and text encoder.
SIZES = [("tiny", 64, 4, 8), ("small", 128, 2, 8)]


def make_small_model(base, out):
    """The bundled model's VAE, text encoder and tokenizer with a larger random UNet."""
    import torch
    from diffusers import UNet2DConditionModel

    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(base, out, ignore=shutil.ignore_patterns("unet"))
    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        block_out_channels=(64, 128, 256), layers_per_block=2, sample_size=16, in_channels=4,
        out_channels=4,
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=64, attention_head_dim=8)
    unet.save_pretrained(os.path.join(out, "unet"), safe_serialization=True)
    return sum(p.numel() for p in unet.parameters())


def loom_job(work, name, model, data, resolution, batch, rank, steps, threads):
    return job_yaml(name, work, "cpu", 0, rank, 1000000, f"""      datasets:
        - folder_path: {data}
          resolution: [{resolution}]
          cache_latents: true
          cache_text_embeddings: true
      train:
        steps: {steps}
        lr: 1e-4
        batch_size: {batch}
        dtype: fp32
        optimizer: adamw
        optimizer_params: {{weight_decay: 0.01}}
        max_grad_norm: 1.0
        gradient_checkpointing: false
        disable_sampling: true
      model: {{name_or_path: {model}, arch: sd1}}
      sample: {{prompts: ['x']}}
      oom: {{host_threads: {threads}}}
""")


def run_measured(cmd, env, log_path):
    """(launch epoch time, peak RSS in bytes, returncode); output to log_path."""
    with open(log_path, "w") as log:
        launched = time.time()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    return launched, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status)


def figures(launched, step_times, rss):
    gaps = [b - a for a, b in zip(step_times[2:], step_times[3:])]
    return {"it_s": 1.0 / statistics.median(gaps), "first_step_s": step_times[0] - launched,
            "rss": rss}


def run_loom(loom, work, name, size_args, env):
    job = os.path.join(work, name + ".yaml")
    with open(job, "w") as f:
        f.write(loom_job(work, name, **size_args))
    launched, rss, rc = run_measured([loom, "train", job, "--fresh"], env,
                                     os.path.join(work, name + ".log"))
    if rc != 0:
        sys.exit(f"loom failed ({rc}); see {work}/{name}.log")
    metrics = [json.loads(l) for l in open(os.path.join(work, "runs", name, "metrics.jsonl"))]
    f = figures(launched, [m["time"] for m in metrics], rss)
    f["profile"] = profile(metrics)
    lora = safe_open(os.path.join(work, "runs", name, name + ".safetensors"), framework="pt")
    f["lora_parameters"] = sum(math.prod(lora.get_slice(k).get_shape())
                               for k in lora.keys() if not k.endswith(".alpha"))
    return f


def profile(metrics):
    """Median seconds per step of each phase loom times (train/step_times.h) and of what lies
    between two steps' ends outside the step itself (metrics, logging, the guard)."""
    steady = metrics[3:]
    gaps = [b["time"] - a["time"] for a, b in zip(metrics[2:], metrics[3:])]
    out = {k: statistics.median(m["phases"][k] for m in steady)
           for k in ("data", "forward", "backward", "optimizer")}
    out["between steps"] = statistics.median(g - m["step_seconds"] for g, m in zip(gaps, steady))
    out["step"] = statistics.median(gaps)
    return out


def run_reference(work, name, a, env):
    log = os.path.join(work, name + ".log")
    cmd = [sys.executable, os.path.join(HERE, "reference_lora.py"), a["model"], a["data"],
           str(a["resolution"]), str(a["batch"]), str(a["steps"]), str(a["rank"]),
           str(a["rank"]), "1e-4", str(a["threads"]), os.path.join(work, name + ".safetensors")]
    launched, rss, rc = run_measured(cmd, env, log)
    if rc != 0:
        sys.exit(f"reference failed ({rc}); see {log}")
    lines = [json.loads(l) for l in open(log) if l.startswith("{\"step\"")]
    f = figures(launched, [l["time"] for l in lines], rss)
    f["lora_parameters"] = [json.loads(l) for l in open(log)
                            if l.startswith("{\"lora_parameters\"")][-1]["lora_parameters"]
    return f


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    loom, base, work = sys.argv[1:4]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    steps = int(sys.argv[5]) if len(sys.argv) > 5 else 30
    threads = int(sys.argv[6]) if len(sys.argv) > 6 else 2
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               LOOM_HOME=os.path.join(work, "home"))  # no plans recorded elsewhere
    small_params = make_small_model(base, os.path.join(work, "small-model"))
    print(f"small model: UNet of {small_params / 1e6:.2f}M parameters")
    models = {"tiny": base, "small": os.path.join(work, "small-model")}
    results = {}
    for name, resolution, batch, rank in SIZES:
        data = os.path.join(work, f"data{resolution}")
        add_images(data, 16, resolution)
        args = dict(model=models[name], data=data, resolution=resolution, batch=batch, rank=rank,
                    steps=steps, threads=threads)
        for r in range(rounds):
            sides = [("loom", lambda n: run_loom(loom, work, n, args, env)),
                     ("reference", lambda n: run_reference(work, n, args, env))]
            for side, run in sides if r % 2 == 0 else reversed(sides):
                f = run(f"{name}_{side}_{r}")
                results.setdefault((name, side), []).append(f)
                counts = {f["lora_parameters"] for fs in (results.get((name, "loom"), []),
                                                          results.get((name, "reference"), []))
                          for f in fs}
                if len(counts) > 1:  # equal settings: the same modules, the same ranks
                    sys.exit(f"loom and the reference train LoRAs of different sizes: {counts}")
                print(f"{name} round {r} {side}: {f['it_s']:.2f} it/s, first step "
                      f"{f['first_step_s']:.2f} s, peak RSS {f['rss'] / 2**20:.0f} MiB",
                      flush=True)

    print(f"\n{rounds} interleaved rounds, {steps} steps each, {threads} threads; medians:")
    print("| model | resolution, batch | loom it/s | reference it/s | ratio | loom first step | "
          "reference first step | ratio | loom peak RSS | reference peak RSS | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, resolution, batch, _ in SIZES:
        med = {side: {k: statistics.median(f[k] for f in results[(name, side)])
                      for k in ("it_s", "first_step_s", "rss")}
               for side in ("loom", "reference")}
        lo, ref = med["loom"], med["reference"]
        print(f"| {name} | {resolution}x{resolution}, {batch} | {lo['it_s']:.2f} | "
              f"{ref['it_s']:.2f} | **{lo['it_s'] / ref['it_s']:.2f}** | "
              f"{lo['first_step_s']:.2f} s | {ref['first_step_s']:.2f} s | "
              f"{ref['first_step_s'] / lo['first_step_s']:.2f} | {lo['rss'] / 2**20:.0f} MiB | "
              f"{ref['rss'] / 2**20:.0f} MiB | {ref['rss'] / lo['rss']:.2f} |")

    print("\nloom's step, where the time goes (medians over every loom run of the size):")
    print("| model | step | data | forward | backward | optimizer | between steps | loom's own "
          "(data + between) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, _, _, _ in SIZES:
        runs = [f["profile"] for f in results[(name, "loom")]]
        p = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        cells = " | ".join(f"{p[k] * 1000:.1f} ms ({p[k] / p['step']:.1%})"
                           for k in ("data", "forward", "backward", "optimizer", "between steps"))
        own = p["data"] + p["between steps"]
        print(f"| {name} | {p['step'] * 1000:.1f} ms | {cells} | {own / p['step']:.1%} |")


if __name__ == "__main__":
    main()
