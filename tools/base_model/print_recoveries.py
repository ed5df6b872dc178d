#!/usr/bin/env python3
"""The quickstart's recap of a run's events.jsonl: each out-of-memory error, each plan change
loom made, and a stable plan reused at the start.

    print_recoveries.py EVENTS_JSONL
"""
import json
import sys

with open(sys.argv[1]) as f:
    for e in map(json.loads, f):
        if e["event"] == "oom":
            where = f" at step {e['step']}" if e.get("step") else ""
            print(f"  oom     in {e['phase']}{where}: {e['message']}")
        elif e["event"] == "change":
            print(f"  change  {e['knob']}: {e['from']} -> {e['to']} ({e['rule']})")
        elif e["event"] == "reuse":
            print(f"  reuse   stable plan #{e['stable_id']}: {e['plan']}")
