#!/usr/bin/env python3
"""Python side of scripts/bench_optim.sh: the optimizers ai-toolkit builds for
`optimizer: adamw` (torch.optim.AdamW), `adamw8bit` (bitsandbytes.optim.AdamW8bit) and `prodigy`
(prodigyopt.Prodigy), with ai-toolkit's arguments (eps=1e-6), stepping on the same LoRA shapes
as bench/optimizer_step.cpp, on the CPU. Prints the same lines: "<optimizer> state_bytes <n>
parameters <n> step_seconds <s>" (state bytes: every tensor in the optimizer's state, shared
quantization maps once).

    optimizer_step.py THREADS REPEATS RANK BLOCKS
"""

import sys
import time

import torch


def lora_parameters(rank, blocks):
    d = 3072
    linears = [(d, d)] * 8 + [(d, 6 * d)] * 2 + [(d, 4 * d), (4 * d, d)] * 2
    torch.manual_seed(0)
    params = []
    for _ in range(blocks):
        for fan_in, fan_out in linears:
            params.append(torch.nn.Parameter(torch.randn(rank, fan_in) * 0.01))
            params.append(torch.nn.Parameter(torch.zeros(fan_out, rank)))
    return params


def make(name, params):
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, eps=1e-6, weight_decay=0.01)
    if name == "adamw8bit":
        import bitsandbytes as bnb
        return bnb.optim.AdamW8bit(params, lr=1e-4, eps=1e-6)
    from prodigyopt import Prodigy
    return Prodigy(params, lr=1.0, eps=1e-6)


def state_bytes(opt):
    seen, total = set(), 0
    for state in opt.state.values():
        for value in state.values():
            if torch.is_tensor(value) and value.data_ptr() not in seen:
                seen.add(value.data_ptr())
                total += value.numel() * value.element_size()
    return total


def main():
    threads, repeats, rank, blocks = (int(a) for a in sys.argv[1:5])
    torch.set_num_threads(threads)
    for name in ("adamw", "adamw8bit", "prodigy"):
        params = lora_parameters(rank, blocks)
        count = sum(p.numel() for p in params)
        opt = make(name, params)
        for i in range(repeats + 1):
            torch.manual_seed(100 + i)
            for p in params:
                p.grad = torch.randn(p.shape) * 1e-3
            start = time.perf_counter()
            opt.step()
            took = time.perf_counter() - start
            if i:
                print(f"{name} state_bytes {state_bytes(opt)} parameters {count} "
                      f"step_seconds {took}", flush=True)


if __name__ == "__main__":
    main()
