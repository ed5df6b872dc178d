#pragma once

// The train layer's loggers, defined once for every unit of the layer (a per-file copy in an
// anonymous namespace would clash when units are built together, cmake/LoomUnityBuild.cmake).

#include "loom/core/logging.h"

namespace loom {

inline const Logger& train_log() {
    static const Logger l = logger("train");
    return l;
}

// Streaming and host offload (low_vram), logged under their own name so a user can grep them.
inline const Logger& low_vram_log() {
    static const Logger l = logger("low_vram");
    return l;
}

}  // namespace loom
