"""The job YAML the benchmarks give `loom train`: one ai-toolkit sd_trainer process with a LoRA
of rank R (alpha R) saved as float32, into WORK/runs/NAME. Each benchmark passes the rest of the
process (datasets, train, model, sample, oom) as YAML lines indented for the process."""


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
