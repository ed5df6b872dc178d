"""References for loom's 8-bit AdamW and Prodigy (issue 20): the Python optimizers ai-toolkit
builds for `optimizer: adamw8bit` and `optimizer: prodigy`, stepped on the CPU with seeded
parameters and gradients, every intermediate written for tests/train/test_optimizer_parity.cpp.

  OUT/optimizers/adamw8bit.safetensors  bitsandbytes.optim.AdamW8bit(lr=1e-4, eps=1e-6,
      weight_decay=0.01) — ai-toolkit's arguments with bitsandbytes' default decay — on `big`
      (5000 elements: 8-bit moments in 20 blocks of 256, the last one partial; one all-zero block
      of gradient at step 1) and `small` (1000 elements: float32 moments). Per step k: the
      gradients g_<name>_<k>, the weights p_<name>_<k>, the moments (state1/state2: codes and
      absmax1/absmax2 for big, float32 for small); qmap1 and qmap2.
  OUT/optimizers/prodigy.safetensors    prodigyopt.Prodigy(lr=1.0, eps=1e-6, weight_decay=1e-4)
      on a LoRA-down-like `down` (16x64) and a zero-initialised `up` (32x16), 6 steps: gradients,
      weights and d (float64) per step.
"""

import os

import torch
from safetensors.torch import save_file


def build_adamw8bit(out):
    import bitsandbytes as bnb

    torch.manual_seed(0)
    init = {"big": torch.randn(5000) * 0.02, "small": torch.randn(1000) * 0.02}
    params = {n: torch.nn.Parameter(t.clone()) for n, t in init.items()}
    opt = bnb.optim.AdamW8bit(list(params.values()), lr=1e-4, eps=1e-6, weight_decay=0.01)
    tensors = {f"p_{n}_0": t.clone() for n, t in init.items()}
    for k in range(1, 4):
        grads = {"big": torch.randn(5000) * 1e-3 * k, "small": torch.randn(1000) * 1e-3}
        if k == 1:
            grads["big"][3 * 256:4 * 256] = 0.0  # a block whose maximum is 0
        for n, p in params.items():
            p.grad = grads[n].clone()
            tensors[f"g_{n}_{k}"] = grads[n].clone()
        opt.step()
        for n, p in params.items():
            state = opt.state[p]
            tensors[f"p_{n}_{k}"] = p.detach().clone()
            tensors[f"state1_{n}_{k}"] = state["state1"].clone()
            tensors[f"state2_{n}_{k}"] = state["state2"].clone()
            if n == "big":
                tensors[f"absmax1_{n}_{k}"] = state["absmax1"].clone()
                tensors[f"absmax2_{n}_{k}"] = state["absmax2"].clone()
    tensors["qmap1"] = opt.state[params["big"]]["qmap1"].clone()
    tensors["qmap2"] = opt.state[params["big"]]["qmap2"].clone()
    save_file(tensors, os.path.join(out, "adamw8bit.safetensors"))


def build_prodigy(out):
    from prodigyopt import Prodigy

    torch.manual_seed(0)
    init = {"down": torch.randn(16, 64) * 0.02, "up": torch.zeros(32, 16)}
    drift = {"down": torch.randn(16, 64) * 1e-3, "up": torch.randn(32, 16) * 1e-3}
    params = {n: torch.nn.Parameter(t.clone()) for n, t in init.items()}
    opt = Prodigy(list(params.values()), lr=1.0, eps=1e-6, weight_decay=1e-4)
    tensors = {f"p_{n}_0": t.clone() for n, t in init.items()}
    for k in range(1, 7):
        for n, p in params.items():
            g = drift[n] + torch.randn(p.shape) * 1e-4
            p.grad = g.clone()
            tensors[f"g_{n}_{k}"] = g
        opt.step()
        for n, p in params.items():
            tensors[f"p_{n}_{k}"] = p.detach().clone()
        tensors[f"d_{k}"] = torch.tensor([opt.param_groups[0]["d"]], dtype=torch.float64)
    save_file(tensors, os.path.join(out, "prodigy.safetensors"))


def build(out):
    folder = os.path.join(out, "optimizers")
    os.makedirs(folder, exist_ok=True)
    build_adamw8bit(folder)
    build_prodigy(folder)
