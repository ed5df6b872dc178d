"""Writing a parity case: OUT/cases/<name>.inputs.safetensors and <name>.expected.safetensors,
the inputs loom runs on and the reference's outputs (shared by the reference builders)."""
import os

from safetensors.torch import save_file


def save_case(cases, name, inputs, expected):
    save_file({k: v.contiguous() for k, v in inputs.items()},
              os.path.join(cases, f"{name}.inputs.safetensors"))
    save_file({k: v.detach().contiguous() for k, v in expected.items()},
              os.path.join(cases, f"{name}.expected.safetensors"))
