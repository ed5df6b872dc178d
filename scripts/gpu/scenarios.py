#!/usr/bin/env python3
"""The measured scenarios of scripts/gpu_check.sh (issue 17), one per call, each writing its
figures and verdict to OUT/parts/<scenario>.json. gpu_check.sh runs each under its own time limit,
so a hang costs one scenario, not the machine's budget.

  step_oom     a step OOM forced by a cap just under the step's measured peak: the ladder
               recovers, zero steps lost, the OOM event carries the allocator's figures
  sample_oom   the first preview at a large size runs out: only sampling shrinks
  low_vram     low_vram levels 0-3 (and level 3 with perf.stream_prefetch) measured: peak
               reserved and step time
  throughput   loom against the diffusers + peft loop (bench/reference_lora.py) at equal
               settings, interleaved rounds, batch 1 and 4, with and without gradient
               checkpointing; then loom's perf switches each on against off
  dirty        another process holds most of the card: loom stops with exit code 5 before a step
  dist_one_rank  torchrun --no-python starts loom as the one rank of a process group: the
               data-parallel path (NCCL on CUDA) trains the LoRA a plain run trains

Every figure is read from the run folders loom writes (events.jsonl, metrics.jsonl), never
assumed. `--dry` runs the same logic at toy sizes on the simulated device (and the CPU for the
throughput comparison), which is how CI proves the script before any GPU is available.

    scenarios.py SCENARIO --loom LOOM --model MODEL --work WORK --out OUT [--dry]
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import loom_job  # noqa: E402
from tiny_data import add_images  # noqa: E402


class Settings:
    """What the scenarios run at: the real sizes on a GPU, toy sizes in the dry run."""

    def __init__(self, dry):
        self.dry = dry
        self.device = "sim" if dry else "cuda:0"
        # The sim device needs a budget; its default is roomy for the toy model.
        self.roomy = "2GiB" if dry else None
        self.resolution = 64 if dry else 512
        self.sample_size = 256 if dry else 1024
        self.dtype = "fp32" if dry else "bf16"
        self.steps = 6 if dry else 12
        self.rank = 16
        self.ref_device = "cpu" if dry else "cuda"
        # The dry run proves the script, not the figures: one round per side is enough there.
        self.rounds = 1 if dry else 2
        # Steps a throughput run trains: two warm-up steps, then the timed gaps (three suffice
        # to prove the script in the dry run, whose figures mean nothing).
        self.throughput_steps = 6 if dry else self.steps + 8
        self.model = None  # the base model folder (make_models.py)
        self.throughput_device = "cpu" if dry else self.device
        # The comparisons (batch, gradient checkpointing); the dry run proves the script with
        # both of batch's values and both of checkpointing's, not every pairing.
        self.comparisons = ((1, False), (4, True)) if dry else ((1, False), (4, False), (4, True))


class Failure(Exception):
    pass


def write_job(path, name, work, s, data, steps, batch, checkpointing, probe=False,
              sample=None, vram=None, low_vram=0, perf=None, device=None, seed=3,
              streamed_blocks=None):
    """One ai-toolkit sd_trainer job; `sample` = preview size (None: sampling off)."""
    sampling = (f"""        disable_sampling: false
        skip_first_sample: false""" if sample else "        disable_sampling: true")
    sample_block = (f"""      sample:
        prompts: ['a red square']
        width: {sample}
        height: {sample}
        sample_steps: 2
        sample_every: 1000000
        guidance_scale: 5.0""" if sample else "      sample: {prompts: ['x']}")
    oom = {"probe": str(probe).lower(), "reuse_stable": '"off"', "low_vram_level": low_vram}
    if streamed_blocks is not None:
        oom["streamed_blocks"] = streamed_blocks
    if vram or s.roomy:
        oom["vram_limit"] = vram or s.roomy
    perf_block = ""
    if perf:
        perf_block = "      perf: {" + ", ".join(f"{k}: {str(v).lower()}"
                                                  for k, v in perf.items()) + "}\n"
    rest = f"""      datasets:
        - folder_path: {data}
          resolution: [{s.resolution}]
          cache_latents: true
          cache_text_embeddings: true
      train:
        steps: {steps}
        lr: 1e-4
        batch_size: {batch}
        dtype: {s.dtype}
        gradient_checkpointing: {str(checkpointing).lower()}
{sampling}
      model: {{name_or_path: {s.model}, arch: sd1}}
{sample_block}
      oom: {{{", ".join(f"{k}: {v}" for k, v in oom.items())}}}
{perf_block}"""
    text = loom_job.job_yaml(name, work, device or s.device, seed, s.rank, 1000000, rest)
    with open(path, "w") as f:
        f.write(text)


def train(loom, work, name, s, env=None, **job):
    """Runs one job to its end: (events, metrics, seconds, returncode, log tail)."""
    path = os.path.join(work, name + ".yaml")
    write_job(path, name, work, s, **job)
    start = time.time()
    out = subprocess.run([loom, "train", path, "--fresh", "--no-supervise"], capture_output=True,
                         text=True, env=env)
    seconds = time.time() - start
    run = os.path.join(work, "runs", name)
    events = read_jsonl(os.path.join(run, "events.jsonl"))
    metrics = read_jsonl(os.path.join(run, "metrics.jsonl"))
    return events, metrics, seconds, out.returncode, (out.stdout + out.stderr)[-3000:]


def train_ok(loom, work, name, s, **job):
    events, metrics, seconds, rc, tail = train(loom, work, name, s, **job)
    if rc != 0:
        raise Failure(f"loom train {name} exited {rc}:\n{tail}")
    return events, metrics, seconds


def read_jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def probe_peaks(loom, work, name, s, **job):
    """{part: peak} of the pre-flight probe of one 1-step run (train, and sample if on)."""
    events, _, _ = train_ok(loom, work, "calibrate_" + name, s, steps=1, probe=True, **job)
    return {e["part"]: e["peak"] for e in events if e["event"] == "probe"}


def step_times(metrics):
    """Median seconds between consecutive step ends, after two warm-up steps."""
    t = [m["time"] for m in sorted(metrics, key=lambda m: m["step"])]
    gaps = [b - a for a, b in zip(t[2:], t[3:])] or [b - a for a, b in zip(t, t[1:])]
    return statistics.median(gaps) if gaps else None


def kib(n):
    return f"{int(n) // 1024}KiB"


def scenario_step_oom(loom, work, s):
    """A cap just under the peak of a step at batch 4 without checkpointing, the probe off so
    the OOM happens in a real step."""
    data = os.path.join(work, "data")
    job = dict(data=data, batch=4, checkpointing=False)
    peak = probe_peaks(loom, work, "step", s, **job)["train"]
    cap = int(peak * 0.93)
    events, metrics, _ = train_ok(loom, work, "step_oom", s, steps=s.steps, vram=kib(cap), **job)
    ooms = [e for e in events if e["event"] == "oom"]
    changes = [e for e in events if e["event"] == "change"]
    trained = len({m["step"] for m in metrics})
    step = step_times(metrics)
    latency = []
    for o in ooms:
        t = iso_seconds(o["time"])
        after = [m["time"] for m in metrics if m["time"] >= t]
        if after and step:
            latency.append(round((after[0] - t) / step, 2))
    first = ooms[0] if ooms else {}
    result = {
        "measured_step_peak": peak, "cap": cap, "steps_asked": s.steps, "steps_trained": trained,
        "steps_lost": s.steps - trained, "ooms": len(ooms),
        "oom_phases": sorted({o["phase"] for o in ooms}),
        "rules": [c["rule"] for c in changes],
        "recovery_latency_step_times": latency,
        "allocator_at_first_oom": {k: first.get(k) for k in
                                   ("allocated", "reserved", "free", "total", "peak")},
    }
    checks = {
        "an OOM happened in a training step": any(o["phase"] == "train_step" for o in ooms),
        "the ladder changed the plan": bool(changes),
        "zero steps lost": trained == s.steps,
        "the OOM event carries allocator figures":
            bool(first) and first.get("reserved", 0) > 0 and first.get("total", 0) > 0,
    }
    return result, checks


def scenario_sample_oom(loom, work, s):
    """The first preview at sample_size with training at batch 1 and checkpointing: a cap
    between the two peaks must shrink sampling and leave training alone."""
    data = os.path.join(work, "data")
    job = dict(data=data, batch=1, checkpointing=True, sample=s.sample_size)
    peaks = probe_peaks(loom, work, "sample", s, **job)
    train_peak, sample_peak = peaks.get("train", 0), peaks.get("sample", 0)
    result = {"train_peak": train_peak, "sample_peak": sample_peak,
              "sample_size": s.sample_size}
    if sample_peak <= train_peak * 1.05:
        result["note"] = "a preview at this size is not heavier than a step: nothing to show"
        return result, {"a preview is heavier than a training step": False}
    cap = (train_peak + sample_peak) // 2
    events, metrics, _ = train_ok(loom, work, "sample_oom", s, steps=s.steps, vram=kib(cap),
                                  **job)
    ooms = [e for e in events if e["event"] == "oom"]
    changes = [e for e in events if e["event"] == "change"]
    knobs = sorted({c["knob"] for e in changes for c in e["changes"]})
    trained = len({m["step"] for m in metrics})
    result.update({"cap": cap, "ooms": len(ooms), "oom_phases": sorted({o["phase"] for o in ooms}),
                   "rules": [c["rule"] for c in changes], "knobs_changed": knobs,
                   "steps_trained": trained, "steps_lost": s.steps - trained})
    checks = {
        "the first preview ran out of memory":
            any(o["phase"] in ("first_sample", "sample") for o in ooms),
        "only sampling changed": bool(knobs) and all(k.startswith("sample") for k in knobs),
        "zero steps lost": trained == s.steps,
    }
    return result, checks


def scenario_low_vram(loom, work, s):
    """Each low_vram level (and level 3 with the side-stream prefetch) at batch 1, checkpointing
    on: the step's peak reserved memory and its median time."""
    data = os.path.join(work, "data")
    rows = []
    for level, prefetch in ((0, False), (1, False), (2, False), (3, False), (3, True)):
        name = f"low_vram_{level}" + ("_prefetch" if prefetch else "")
        _, metrics, _ = train_ok(loom, work, name, s, data=data, steps=s.steps, batch=1,
                                 checkpointing=True, low_vram=level,
                                 perf={"stream_prefetch": True} if prefetch else None)
        if prefetch:
            require_switch(work, name, "stream_prefetch")
        rows.append({"level": level, "stream_prefetch": prefetch,
                     "peak_reserved": max(m.get("peak_reserved", 0) for m in metrics),
                     "peak_allocated": max(m["peak_allocated"] for m in metrics),
                     "step_seconds": step_times(metrics)})
    level2 = next(r for r in rows if r["level"] == 2)["step_seconds"]
    streamed = next(r for r in rows if r["stream_prefetch"])["step_seconds"]
    result = {"levels": rows,
              "prefetch_step_over_level2": round(streamed / level2, 3) if level2 else None}
    peaks = [r["peak_reserved"] or r["peak_allocated"] for r in rows[:4]]
    checks = {"every level trained": len(rows) == 5,
              "level 3 holds less than level 0 at its peak": peaks[3] < peaks[0]}
    return result, checks


def scenario_streamed_blocks(loom, work, s):
    """Block streaming as a count (issue 64): a cap between level 3's step peak with every block
    streaming and level 2's; the run starts at level 2 with the probe on and the ladder picks how
    many blocks stream. Then level 3 with 1 block, half of them and every one streaming, on the
    compute stream and with the side-stream prefetch: the step time per count."""
    data = os.path.join(work, "data")
    job = dict(data=data, batch=1, checkpointing=True)

    def step_peak(name, **more):  # a trained step's peak: the optimizer's state included
        _, m, _ = train_ok(loom, work, "calibrate_" + name, s, steps=2, **job, **more)
        return max(x["peak_allocated"] for x in m)

    level2 = step_peak("level2", low_vram=2)
    every = step_peak("every_block", low_vram=3)
    cap = every + (level2 - every) // 2
    events, metrics, _ = train_ok(loom, work, "ladder", s, steps=s.steps, probe=True,
                                  vram=kib(cap), low_vram=2, **job)
    changes = [e for e in events if e["event"] == "change"]
    plan_text = changes[-1]["plan"] if changes else ""
    blocks = None
    for e in events:  # "(N of M blocks stream from the host: ...)" in the rung's reason
        found = re.search(r"\((\d+) of (\d+) blocks stream from the host", e.get("reason", ""))
        if found:
            blocks = int(found.group(1))
    counts = sorted({1, max(1, (blocks or 2) // 2), 0})
    rows = []
    for count in counts:
        for prefetch in (False, True):
            name = f"n{count}" + ("_prefetch" if prefetch else "")
            _, m, _ = train_ok(loom, work, name, s, steps=s.steps, low_vram=3,
                               streamed_blocks=count,
                               perf={"stream_prefetch": True} if prefetch else None, **job)
            rows.append({"streamed_blocks": count, "stream_prefetch": prefetch,
                         "peak_allocated": max(x["peak_allocated"] for x in m),
                         "step_seconds": step_times(m)})
    result = {"cap": cap, "level2_peak": level2, "every_block_peak": every,
              "ladder_plan": plan_text, "ladder_rules": [c["rule"] for c in changes],
              "ladder_steps": len(metrics), "blocks": blocks, "counts": rows}
    checks = {"the ladder's run trained every step": len(metrics) == s.steps,
              "every count trained": len(rows) == 2 * len(counts)}
    return result, checks


def loom_rate(loom, work, name, s, data, batch, checkpointing, perf=None):
    _, metrics, _ = train_ok(loom, work, name, s, data=data, steps=s.throughput_steps,
                             batch=batch, checkpointing=checkpointing,
                             device=s.throughput_device, perf=perf)
    for switch in perf or {}:
        require_switch(work, name, switch)
    return 1.0 / step_times(metrics)


def require_switch(work, name, switch):
    """The run's resolved config (config.yaml in its folder) has `perf.<switch>: true`: a switch
    the binary did not know would otherwise time the plain run twice."""
    with open(os.path.join(work, "runs", name, "config.yaml")) as f:
        text = f.read()
    if f"{switch}: true" not in text:
        raise Failure(f"{name}: perf.{switch} is not on in the run's config.yaml")


def reference_rate(work, name, s, data, batch, checkpointing):
    log = os.path.join(work, name + ".log")
    cmd = [sys.executable, os.path.join(ROOT, "bench", "reference_lora.py"), s.model, data,
           str(s.resolution), str(batch), str(s.throughput_steps), str(s.rank), str(s.rank), "1e-4",
           str(os.cpu_count() if not s.dry else 2), os.path.join(work, name + ".safetensors"),
           "--device", s.ref_device, "--dtype", s.dtype]
    if checkpointing:
        cmd.append("--gradient-checkpointing")
    with open(log, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise Failure(f"the reference loop exited {rc}; see {log}")
    with open(log) as f:
        t = [json.loads(line)["time"] for line in f if line.startswith('{"step"')]
    gaps = [b - a for a, b in zip(t[2:], t[3:])]
    return 1.0 / statistics.median(gaps)


def scenario_throughput(loom, work, s):
    """loom against the reference at equal settings (resolution, batch, rank 16, dtype, cached
    latents and text embeddings, AdamW, clipping at 1.0), rounds alternating which side runs
    first; then each perf switch on against off at batch 1 (where launch overhead shows)."""
    data = os.path.join(work, "data")
    rows = []
    for batch, checkpointing in s.comparisons:
        rates = {"loom": [], "reference": []}
        for r in range(s.rounds):
            sides = [("loom", lambda n: loom_rate(loom, work, n, s, data, batch, checkpointing)),
                     ("reference", lambda n: reference_rate(work, n, s, data, batch,
                                                            checkpointing))]
            for side, run in sides if r % 2 == 0 else reversed(sides):
                rates[side].append(run(f"tp_{side}_b{batch}_gc{int(checkpointing)}_{r}"))
        lo, ref = statistics.median(rates["loom"]), statistics.median(rates["reference"])
        rows.append({"batch": batch, "gradient_checkpointing": checkpointing,
                     "loom_it_s": round(lo, 3), "reference_it_s": round(ref, 3),
                     "ratio": round(lo / ref, 3), "loom_rounds": rates["loom"],
                     "reference_rounds": rates["reference"]})
    switches = []
    off = loom_rate(loom, work, "sw_off", s, data, 1, False)
    for switch in ("cuda_graphs", "channels_last", "fused_adamw"):
        on = loom_rate(loom, work, f"sw_{switch}", s, data, 1, False, perf={switch: True})
        switches.append({"switch": switch, "off_it_s": round(off, 3), "on_it_s": round(on, 3),
                         "ratio": round(on / off, 3)})
    result = {"comparisons": rows, "switches_batch1": switches}
    checks = {"every comparison ran": len(rows) == len(s.comparisons),
              "every switch trained": len(switches) == 3}
    return result, checks


def scenario_dirty(loom, work, s):
    """A second process holds most of the card before loom starts (on sim: LOOM_FAULTS=dirty,
    the same report from the device): loom must stop with exit code 5 before it trains a step.
    How long it took is a figure of the report, not a check (the part's time limit catches a
    hang)."""
    data = os.path.join(work, "data")
    holder = None
    env = dict(os.environ)
    if s.dry:
        env["LOOM_FAULTS"] = "dirty"
    else:
        holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE,
                                  text=True)
        line = holder.stdout.readline()  # "held N" once the memory is taken
        if not line.startswith("held"):
            raise Failure("the memory-holding process did not start")
    try:
        _, metrics, seconds, rc, tail = train(loom, work, "dirty", s, env=env, data=data,
                                        steps=s.steps, batch=1, checkpointing=True)
    finally:
        if holder:
            holder.send_signal(signal.SIGTERM)
            holder.wait()
    result = {"exit_code": rc, "seconds": round(seconds, 2), "log_tail": tail[-600:]}
    checks = {"exit code 5": rc == 5, "stopped before training a step": not metrics}
    return result, checks


def scenario_dist_one_rank(loom, work, s):
    """The data-parallel path with one rank (issue 23): torchrun --no-python starts `loom train`
    as rank 0 of 1, which joins its process group and trains through it — the agreement after
    every attempt, the gradients summed by the group (NCCL on CUDA, Gloo on sim), the update's
    undo copy. Its LoRA must be the one a plain run trains."""
    data = os.path.join(work, "data")
    job = dict(data=data, steps=s.steps, batch=2, checkpointing=True)
    train_ok(loom, work, "plain", s, **job)
    path = os.path.join(work, "one_rank.yaml")
    write_job(path, "one_rank", work, s, **job)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--no-python", "--nproc-per-node", "1",
           "--master-port", str(29000 + os.getpid() % 1000), loom, "train", path, "--fresh"]
    start = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.time() - start
    log = out.stdout + out.stderr
    metrics = read_jsonl(os.path.join(work, "runs", "one_rank", "metrics.jsonl"))
    result = {"exit_code": out.returncode, "seconds": round(seconds, 2),
              "backend": ("nccl" if "on the device (NCCL)" in log else
                          "gloo" if "through host memory (Gloo)" in log else "none"),
              "sync_seconds": statistics.median(m["phases"].get("sync", 0.0) for m in metrics)
              if metrics else None, "log_tail": log[-800:]}
    diff = None
    if out.returncode == 0:
        import torch  # noqa: F401  (safetensors.torch needs it)
        from safetensors.torch import load_file
        a = load_file(os.path.join(work, "runs", "plain", "plain.safetensors"))
        b = load_file(os.path.join(work, "runs", "one_rank", "one_rank.safetensors"))
        diff = max((a[k].double() - b[k].double()).abs().max().item() for k in a)
    result["lora_max_abs_diff"] = diff
    checks = {"exit code 0": out.returncode == 0,
              "rank 0 of 1 joined its group": "rank 0 of 1" in log,
              "gradients summed by NCCL" if not s.dry else "gradients summed by Gloo":
                  result["backend"] == ("gloo" if s.dry else "nccl"),
              "every step trained once": [m["step"] for m in metrics] ==
                  list(range(1, s.steps + 1)),
              "the LoRA of a plain run": diff is not None and diff <= (1e-5 if s.dry else 2e-2)}
    return result, checks


# Takes all but 1 GiB of the card's free memory and holds it until killed.
HOLDER = """
import sys, time, torch
free, total = torch.cuda.mem_get_info()
x = torch.empty(free - (1 << 30), dtype=torch.uint8, device="cuda")
print("held", x.numel(), flush=True)
time.sleep(600)
"""


def iso_seconds(text):
    import datetime
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


SCENARIOS = {"step_oom": scenario_step_oom, "sample_oom": scenario_sample_oom,
             "low_vram": scenario_low_vram, "streamed_blocks": scenario_streamed_blocks,
             "throughput": scenario_throughput,
             "dirty": scenario_dirty, "dist_one_rank": scenario_dist_one_rank}


def main():
    p = argparse.ArgumentParser(usage=__doc__)
    p.add_argument("scenario", choices=sorted(SCENARIOS))
    p.add_argument("--loom", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--dry", action="store_true")
    a = p.parse_args()
    s = Settings(a.dry)
    s.model = os.path.abspath(a.model)
    work = os.path.join(os.path.abspath(a.work), a.scenario)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    # A store of the check's own: no plan recorded by an earlier scenario is reused.
    os.environ["LOOM_HOME"] = os.path.join(work, "home")
    add_images(os.path.join(work, "data"), 8, s.resolution)
    started = time.time()
    try:
        result, checks = SCENARIOS[a.scenario](os.path.abspath(a.loom), work, s)
        status = "pass" if all(checks.values()) else "fail"
    except Failure as e:
        result, checks, status = {"error": str(e)[-3000:]}, {}, "error"
    part = {"scenario": a.scenario, "status": status, "seconds": round(time.time() - started, 1),
            "checks": checks, "result": result}
    os.makedirs(os.path.join(a.out, "parts"), exist_ok=True)
    with open(os.path.join(a.out, "parts", a.scenario + ".json"), "w") as f:
        json.dump(part, f, indent=2)
    print(json.dumps({"scenario": a.scenario, "status": status, "checks": checks}))
    return 0 if status == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
