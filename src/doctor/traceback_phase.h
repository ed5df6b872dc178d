#pragma once

// Which phase a Python traceback points at: the trainers' function names (ai-toolkit, kohya
// sd-scripts, diffusers scripts) tell a sampling OOM from a training-step, caching or load one
// when the lines before the traceback did not. Internal to the doctor layer.

#include <string_view>

#include "loom/device/phase.h"

namespace loom::doctor::detail {

// The phase one traceback line names: a frame (`File "path", line N, in func`) or the source
// line under it; Phase::kNone when it names none.
Phase traceback_line_phase(std::string_view line);

// Which phase wins when one traceback names several: the higher rank. Sampling runs inside the
// train loop, so its frames outrank the loop's; phases tracebacks never name rank 0.
int traceback_phase_rank(Phase p);

}  // namespace loom::doctor::detail
