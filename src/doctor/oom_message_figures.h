#pragma once

// The figures of an out-of-memory message (sizes requested, free, total, allocated, reserved,
// per process), in every wording OomFigures (loom/doctor/diagnosis.h) lists: PyTorch <= 2.0,
// PyTorch 2.1+ and loom's sim budget. Internal to the doctor layer.

#include <string_view>

#include "loom/doctor/diagnosis.h"

namespace loom::doctor::detail {

// Reads every figure `s` has into `f`, keeping the figures `f` already has (the first wording
// seen wins). Returns whether `s` had any. Leaves `f.line` to the caller.
bool read_figures(std::string_view s, OomFigures& f);

}  // namespace loom::doctor::detail
