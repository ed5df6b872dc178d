#pragma once

// The guard layer's logger, defined once for every unit of the layer (a per-file copy in an
// anonymous namespace would clash when units are built together, cmake/LoomUnityBuild.cmake).

#include "loom/core/logging.h"

namespace loom::guard {

inline const Logger& guard_log() {
    static const Logger l = logger("guard");
    return l;
}

}  // namespace loom::guard
