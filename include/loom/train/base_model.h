#pragma once

// The frozen base model of a training run: the job's model folder loaded into host memory in
// the compute dtype (train.dtype), its arch checked against the job's, v-prediction applied
// (model.is_v_pred), every weight frozen. Placing it on the device is low_vram's part
// (train/low_vram.h).

#include "loom/config/job.h"
#include "loom/model/stable_diffusion.h"

namespace loom {

// Throws ConfigError when the job's arch is not one loom trains, and like
// load_stable_diffusion when the folder cannot be loaded.
StableDiffusion load_frozen_base(const config::ProcessConfig& process);

}  // namespace loom
