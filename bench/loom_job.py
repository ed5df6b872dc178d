"""The job YAML the benchmarks give `loom train`: one ai-toolkit sd_trainer process with a LoRA
of rank R (alpha R) saved as float32, into WORK/runs/NAME. Each benchmark passes the rest of the
process (datasets, train, model, sample, oom) as YAML lines indented for the process."""

import os


def job_yaml(name, work, device, seed, rank, save_every, rest):
    return f"""job: extension
config:
  name: {name}
  process:
    - type: sd_trainer
      training_folder: {work}/runs
      device: {device}
      training_seed: {seed}
      network: {{linear: {rank}, linear_alpha: {rank}}}
      save: {{save_every: {save_every}, dtype: float32}}
""" + rest


# The plan.yaml a run folder starts from to train at one low_vram level as the ladder has it when
# it gets there: gradient checkpointing on, batch 1, sampling off.
LEVEL_PLAN = """train: {{gradient_checkpointing: true, batch_size: 1, gradient_accumulation: 1}}
datasets: {{max_bucket_pixels: null, num_frames: 1}}
model: {{low_vram: {level}}}
sample: {{enabled: false, width: 64, height: 64, batch_prompts: true, batch_guidance: true, num_frames: 1}}
host: {{memory_caches: true, threads: 0}}
"""


def write_level_plan(run_dir, level):
    with open(os.path.join(run_dir, "plan.yaml"), "w") as f:
        f.write(LEVEL_PLAN.format(level=level))
