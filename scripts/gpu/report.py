#!/usr/bin/env python3
"""The results of scripts/gpu_check.sh: the parts' status files and the scenarios' figures
(WORK/parts) merged into OUT/results.json and one markdown table, OUT/results.md, with the
machine, the torch version and the date. Exits 1 when a part failed or timed out.

    report.py WORK OUT [--dry 0|1] [--loom LOOM]
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys

ORDER = ["build", "gpu_tests", "models", "step_oom", "sample_oom", "low_vram", "streamed_blocks",
         "throughput", "dirty", "dist_one_rank"]


def run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def machine():
    gpu = run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
               "--format=csv,noheader"])
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    try:
        import torch
        torch_version = torch.__version__
        cuda = torch.version.cuda
    except ImportError:
        torch_version, cuda = None, None
    return {"gpu": gpu or None, "cpu": cpu, "cores": os.cpu_count(),
            "os": platform.platform(), "python": platform.python_version(),
            "torch": torch_version, "torch_cuda": cuda}


def load_parts(work):
    parts = {}
    folder = os.path.join(work, "parts")
    for name in ORDER:
        status_file = os.path.join(folder, name + ".status.json")
        if not os.path.exists(status_file):
            continue
        with open(status_file) as f:
            part = json.load(f)
        scenario_file = os.path.join(folder, name + ".json")
        if os.path.exists(scenario_file):
            with open(scenario_file) as f:
                part["scenario"] = json.load(f)
        parts[name] = part
    return parts


def verdict(part):
    if part["timed_out"]:
        return "timed out"
    scenario = part.get("scenario")
    if scenario:
        return scenario["status"]
    return "pass" if part["rc"] == 0 else "fail"


def mib(n):
    return f"{n / 2**20:.0f} MiB" if n else "—"


def figures(name, r):
    """One line of the part's headline figures."""
    if not r or "error" in r:
        return (r or {}).get("error", "")[:200].replace("\n", " ").replace("|", "/")
    if name == "step_oom":
        a = r["allocator_at_first_oom"]
        return (f"cap {mib(r['cap'])} under a step peak of {mib(r['measured_step_peak'])}; "
                f"{r['ooms']} OOM(s) {', '.join(r['oom_phases'])}; rules {', '.join(r['rules'])}; "
                f"{r['steps_trained']}/{r['steps_asked']} steps; latency "
                f"{r['recovery_latency_step_times']} step-times; at the OOM: reserved "
                f"{mib(a.get('reserved'))}, free {mib(a.get('free'))} of {mib(a.get('total'))}")
    if name == "sample_oom":
        if "cap" not in r:
            return r.get("note", "")
        return (f"preview {r['sample_size']} px: peak {mib(r['sample_peak'])} against a step's "
                f"{mib(r['train_peak'])}; cap {mib(r['cap'])}; rules {', '.join(r['rules'])}; "
                f"knobs {', '.join(r['knobs_changed'])}; {r['steps_lost']} steps lost")
    if name == "low_vram":
        cells = []
        for row in r["levels"]:
            label = f"L{row['level']}" + ("+prefetch" if row["stream_prefetch"] else "")
            peak = row["peak_reserved"] or row["peak_allocated"]
            t = row["step_seconds"]
            cells.append(f"{label} {mib(peak)} {t * 1000:.0f} ms" if t else f"{label} {mib(peak)}")
        return "; ".join(cells) + f"; prefetch / level 2 = {r['prefetch_step_over_level2']}"
    if name == "streamed_blocks":
        cells = [f"cap {mib(r['cap'])} (level 2 {mib(r['level2_peak'])}, every block "
                 f"{mib(r['every_block_peak'])}): the ladder streamed {r['blocks']} blocks"]
        for row in r["counts"]:
            label = f"N={row['streamed_blocks'] or 'all'}" + ("+prefetch" if row["stream_prefetch"] else "")
            t = row["step_seconds"]
            cells.append(f"{label} {mib(row['peak_allocated'])}" + (f" {t * 1000:.0f} ms" if t else ""))
        return "; ".join(cells)
    if name == "throughput":
        cells = [f"b{c['batch']}{' gc' if c['gradient_checkpointing'] else ''}: loom "
                 f"{c['loom_it_s']} it/s, reference {c['reference_it_s']} it/s, "
                 f"**{c['ratio']}×**" for c in r["comparisons"]]
        cells += [f"{w['switch']} {w['ratio']}×" for w in r["switches_batch1"]]
        return "; ".join(cells)
    if name == "dirty":
        return f"exit code {r['exit_code']} after {r['seconds']} s"
    if name == "dist_one_rank":
        sync = r.get("sync_seconds")
        return (f"1 rank via torchrun, gradients by {r['backend']}; sync "
                f"{sync * 1000:.1f} ms/step; LoRA max diff from a plain run "
                f"{r['lora_max_abs_diff']}" if sync is not None else f"exit {r['exit_code']}")
    return ""


def main():
    p = argparse.ArgumentParser(usage=__doc__)
    p.add_argument("work")
    p.add_argument("out")
    p.add_argument("--dry", default="0")
    p.add_argument("--loom", default="")
    a = p.parse_args()
    parts = load_parts(a.work)
    results = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "dry_run": a.dry == "1",
        "machine": machine(),
        # A binary that built but cannot start (a library missing on the host) prints nothing.
        "loom": (run([a.loom, "--version"]).splitlines() or [None])[0]
        if a.loom and os.path.exists(a.loom) else None,
        "parts": parts,
        "verdict": {name: verdict(part) for name, part in parts.items()},
    }
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)

    m = results["machine"]
    lines = [
        f"GPU check {'(dry run, sim/cpu, toy sizes) ' if results['dry_run'] else ''}"
        f"of {results['date']}: {m['gpu'] or m['cpu']}, {m['cores']} cores; torch {m['torch']}"
        f" (CUDA {m['torch_cuda']}); {results['loom'] or 'loom: no version (not built, or it does not start)'}",
        "",
        "| part | verdict | seconds (limit) | figures |",
        "|---|---|---|---|",
    ]
    for name in ORDER:
        part = parts.get(name)
        if part is None:
            lines.append(f"| {name} | not run | | |")
            continue
        r = part.get("scenario", {}).get("result")
        lines.append(f"| {name} | {verdict(part)} | {part['seconds']} ({part['limit']}) | "
                     f"{figures(name, r)} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(text)
    print(text)
    ran = [name for name in ORDER if name in parts]
    return 0 if ran and all(results["verdict"][n] == "pass" for n in ran) else 1


if __name__ == "__main__":
    sys.exit(main())
