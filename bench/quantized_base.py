"""Quantized base weights (issue 21): the quickstart job (configs/quickstart.yaml) trained with the
same seed and data with a float32 base (low_vram level 1: the encoders on the host, the UNet in
float32 on the device) and with the UNet quantized in each qtype (level 2), on `sim` with a
budget large enough that nothing runs out of memory (no probe, no previews, no stable plan).

For each run:
  - the device bytes after load (the log's "device memory after load": the UNet alone, since
    level 1 and up keep the encoders on the host; exact, the sim allocator counts bytes);
  - the median step time after the first 5 steps (metrics.jsonl `step_seconds`);
  - the per-step loss against the float32 run: the largest and the mean relative difference;
  - the concept score of its LoRA applied to the float base (tools/base_model/concept_score.py:
    the share of N "a large <colour> zxq ..." samples that are stars, and of N "circle" ones).

    .venv/bin/python bench/quantized_base.py LOOM WORKDIR [STEPS] [N]
"""

import json
import os
import re
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools", "base_model"))
import concept_score  # noqa: E402

ROWS = [("float32", 1, None), ("qfloat8", 2, "qfloat8"), ("qint8", 2, "qint8"),
        ("uint4", 2, "uint4")]


def train(loom, work, name, level, qtype, steps):
    folder = os.path.join(work, "runs")
    p = "config.process.0."
    sets = [f"{p}training_folder={folder}", f"{p}train.steps={steps}",
            f"{p}train.disable_sampling=true", f"{p}oom.probe=false", f"{p}oom.vram_limit=4GiB",
            f"{p}oom.low_vram_level={level}", f"{p}save.dtype=float32",
            f"{p}save.save_every={steps}"]
    if qtype:
        sets.append(f"{p}model.qtype={qtype}")
    cmd = [loom, "train", os.path.join(ROOT, "configs", "quickstart.yaml"), "--no-supervise",
           "--fresh"]
    for s in sets:
        cmd += ["--set", s]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        sys.exit(f"{name} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    run = os.path.join(folder, "quickstart_star")
    log = out.stdout + out.stderr
    m = re.search(r"device memory after load: .* \((\d+) bytes allocated\)", log)
    if not m:
        sys.exit(f"{name}: no 'device memory after load' in the log")
    loaded = int(m.group(1))
    metrics = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    step = statistics.median(x["step_seconds"] for x in metrics[5:])
    lora = os.path.join(work, name + ".safetensors")
    shutil.copy(os.path.join(run, "quickstart_star.safetensors"), lora)
    shutil.rmtree(run)
    return loaded, step, [x["loss"] for x in metrics], lora


def scores(loom, lora, n, work):
    model = os.path.join(ROOT, "datasets", "loom-tiny-sd")
    out = {}
    for word in ("zxq", "circle"):
        images = concept_score.render(loom, model, lora, concept_score.prompts(word, n),
                                      os.path.join(work, word))
        out[word] = concept_score.score(images)
    return out


def main():
    loom, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 400
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 32
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    # The benchmark's own store: no run starts from a plan another recorded.
    os.environ["LOOM_HOME"] = os.path.join(work, "home")
    results = {}
    for name, level, qtype in ROWS:
        loaded, step, losses, lora = train(loom, work, name, level, qtype, steps)
        results[name] = (loaded, step, losses, scores(loom, lora, n, os.path.join(work, name)))
        print(f"{name}: done", file=sys.stderr)
    f_loaded, f_step, f_losses, f_scores = results["float32"]
    print(f"quickstart job, {steps} steps, seed 7, sim; concept score over {n} prompts")
    print(f"{'base':8} {'UNet bytes':>12} {'vs bf16':>8} {'step':>8} {'vs f32':>7} "
          f"{'loss rel. diff max/mean':>24} {'zxq stars':>10} {'circle stars':>13}")
    bf16 = f_loaded / 2
    for name, (loaded, step, losses, s) in results.items():
        rel = [abs(a - b) / abs(b) for a, b in zip(losses, f_losses)]
        print(f"{name:8} {loaded:12d} {loaded / bf16:8.4f} {step * 1000:5.0f} ms "
              f"{step / f_step:7.2f} {max(rel):11.3f} / {statistics.mean(rel):.4f} "
              f"{s['zxq']:10.2f} {s['circle']:13.2f}")


if __name__ == "__main__":
    main()
