#pragma once

// The frozen base model of a training run: the job's model folder loaded into host memory as its
// family (model/family.h) in the compute dtype (train.dtype), its arch checked against the job's,
// v-prediction applied (model.is_v_pred, DDPM families), every weight frozen. Placing it on the
// device is low_vram's part (train/low_vram.h).

#include <memory>

#include "loom/config/job.h"
#include "loom/model/family.h"

namespace loom {

// Throws ConfigError when the job's arch is not one loom trains or names another family than the
// folder holds, and like load_model_family when the folder cannot be loaded.
std::unique_ptr<ModelFamily> load_frozen_base(const config::ProcessConfig& process);

}  // namespace loom
