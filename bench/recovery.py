"""Recovery figures of the OOM guard (issue 6): scenarios B and D of the guard's tests, run
through the `loom` executable on the simulated device, measured from the run folders.

For each run it reports
  * recovery latency: from an OOM event to the end of the next completed training step, in
    units of the run's median step time (what the failed attempts and the retry cost);
  * steps lost: steps the job asked for minus steps trained (loom: must be 0);
  * what ai-toolkit's documented behaviour (reference/ai-toolkit.md §2.1) would lose in the same
    run: it does not retry — a step whose batch runs out of memory is skipped but still counted,
    and the 4th consecutive OOM aborts the job, losing every step since the last save.

Budgets are measured, not guessed: a one-step calibration run with the probe on reads the peaks
of the plans the scenario moves between, and the budget is set halfway.

    bench/recovery.py LOOM MAKE_TINY_FIXTURE WORKDIR [STEPS]
"""

import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys

import loom_job
from tiny_data import add_images


def job_yaml(work, name, data, steps, batch, checkpointing, probe, vram):
    return loom_job.job_yaml(name, work, "sim", 11, 4, 1000, f"""      datasets:
        - folder_path: {data}
          resolution: [64]
          cache_latents: true
      train:
        steps: {steps}
        lr: 1e-3
        batch_size: {batch}
        gradient_checkpointing: {str(checkpointing).lower()}
        disable_sampling: true
      model: {{name_or_path: {work}/fixture/model, arch: sd1}}
      sample: {{prompts: ['x']}}
      oom: {{vram_limit: {vram}, probe: {str(probe).lower()}, reuse_stable: "off"}}
""")


def train(loom, work, name, **kw):
    path = os.path.join(work, name + ".yaml")
    with open(path, "w") as f:
        f.write(job_yaml(work, name, **kw))
    out = subprocess.run([loom, "train", path, "--fresh"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"loom train {name} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    run = os.path.join(work, "runs", name)
    events = [json.loads(l) for l in open(os.path.join(run, "events.jsonl"))]
    metrics = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
    return events, metrics


def probe_peak(loom, work, name, **kw):
    kw.update(steps=1, probe=True, vram="4GiB")
    events, _ = train(loom, work, "calibrate_" + name, **kw)
    return next(e["peak"] for e in events if e["event"] == "probe" and e["part"] == "train")


def iso_seconds(text):
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def recovery(events, metrics):
    """(latencies in step-times, steps trained) for one run."""
    ooms = [e for e in events if e["event"] == "oom"]
    recovered_steps = {e["step"] for e in ooms if e.get("step")}
    clean = [m["step_seconds"] for m in metrics if m["step"] not in recovered_steps]
    step_time = statistics.median(clean)
    latencies = []
    for oom in ooms:
        t = iso_seconds(oom["time"])
        after = [m for m in metrics if m["time"] >= t]
        if after:
            latencies.append((after[0]["time"] - t) / step_time)
    return latencies, len({m["step"] for m in metrics}), step_time


def aitoolkit_losses(metrics, failing, steps):
    """Steps ai-toolkit would lose: each failing step is skipped (counted, never trained); a 4th
    consecutive failure aborts the job and everything after it is lost too."""
    lost, streak = 0, 0
    for m in sorted(metrics, key=lambda m: m["step"]):
        if failing(m):
            streak += 1
            lost += 1
            if streak > 3:
                return steps - m["step"] + lost, True
        else:
            streak = 0
    return lost, False


def report(title, steps, events, metrics, aitk_lost, aitk_aborted):
    lat, trained, step_time = recovery(events, metrics)
    changes = [e["rule"] for e in events if e["event"] == "change"]
    ooms = [e for e in events if e["event"] == "oom"]
    print(f"{title}")
    print(f"  OOMs {len(ooms)} ({', '.join(sorted({e['phase'] for e in ooms}))}); "
          f"changes: {', '.join(changes)}")
    if lat:
        print(f"  recovery latency: {', '.join(f'{x:.2f}' for x in lat)} step-times "
              f"(median step {step_time * 1000:.0f} ms)")
    print(f"  steps asked {steps}, trained {trained}, lost {steps - trained}")
    verdict = "aborts the job" if aitk_aborted else "finishes"
    print(f"  ai-toolkit (documented behaviour) on the same run: {aitk_lost} of {steps} steps "
          f"lost, {verdict}")


def main():
    loom, fixture, work = sys.argv[1:4]
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 40
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    # A stable-config store of the benchmark's own, and reuse_stable off in every job: the
    # scenarios share a store key, and each run must meet its OOMs, not start from the plan an
    # earlier scenario (or the user's jobs) recorded as stable.
    os.environ["LOOM_HOME"] = os.path.join(work, "home")
    subprocess.run([fixture, os.path.join(work, "fixture")], check=True, capture_output=True)
    add_images(os.path.join(work, "uniform"), 4, 48)
    add_images(os.path.join(work, "rare"), 7, 32)
    add_images(os.path.join(work, "rare"), 1, 64, first=7)
    add_images(os.path.join(work, "small"), 7, 32)

    # B: batch 4 without checkpointing does not fit; checkpointing alone does not either.
    common = dict(data=os.path.join(work, "uniform"), steps=steps)
    gc4 = probe_peak(loom, work, "b_gc4", batch=4, checkpointing=True, **common)
    gc1 = probe_peak(loom, work, "b_gc1", batch=1, checkpointing=True, **common)
    vram = f"{(gc4 + gc1) // 2 // 1024}KiB"
    events, metrics = train(loom, work, "b", batch=4, checkpointing=False, probe=False,
                            vram=vram, **common)
    lost, aborted = aitoolkit_losses(metrics, lambda m: True, steps)  # every step OOMs at batch 4
    report(f"B: step-1 OOM, batch 4, checkpointing off, budget {vram} (probe off)", steps,
           events, metrics, lost, aborted)

    # D: one rare large image; the 64x64 bucket does not fit, 32x32 does.
    rare = dict(data=os.path.join(work, "rare"), steps=steps, batch=1, checkpointing=True)
    large = probe_peak(loom, work, "d_large", **rare)
    small = probe_peak(loom, work, "d_small", **dict(rare, data=os.path.join(work, "small")))
    vram = f"{(large + small) // 2 // 1024}KiB"
    # The same job with room to spare: its data order says which steps draw the 64x64 image
    # (loom re-buckets it after the drop, so its own runs stop showing those steps as 64x64).
    _, unconstrained = train(loom, work, "d_reference", probe=False, vram="4GiB", **rare)
    lost, aborted = aitoolkit_losses(unconstrained, lambda m: "64x64" in m["buckets"], steps)
    for probe in (False, True):
        events, metrics = train(loom, work, f"d_probe_{str(probe).lower()}", probe=probe,
                                vram=vram, **rare)
        report(f"D: rare 64x64 bucket, budget {vram}, probe {'on' if probe else 'off'}", steps,
               events, metrics, lost, aborted)


if __name__ == "__main__":
    main()
