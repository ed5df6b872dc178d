#pragma once

// The CUDA implementation of StepGraphs (loom/device/step_graphs.h); internal to the device layer.

#include <memory>

#include "loom/device/step_graphs.h"

namespace loom {

std::unique_ptr<StepGraphs> make_cuda_step_graphs(Device& device);

}  // namespace loom
