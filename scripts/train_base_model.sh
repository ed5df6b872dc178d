#!/usr/bin/env bash
# Retrain the bundled base model from scratch: datasets/loom-tiny-sd (a tiny SD 1.x — VAE, UNet,
# CLIP text encoder — trained on procedurally generated shapes) and regenerate the quickstart's
# star images (datasets/quickstart-stars). Uses the project's .venv (scripts/setup.sh); options
# go to tools/base_model/train_base_model.py (--unet-minutes, --vae-steps, --seed, ...).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
.venv/bin/python tools/base_model/train_base_model.py --out datasets/loom-tiny-sd "$@"
.venv/bin/python tools/base_model/make_quickstart_data.py datasets/quickstart-stars
