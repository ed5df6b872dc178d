#pragma once

// Which phase a Python traceback points at: the trainers' function names (ai-toolkit, kohya
// sd-scripts, OneTrainer, SimpleTuner, diffusion-pipe, diffusers scripts) tell a sampling OOM from
// a training-step, caching or load one when the lines before the traceback did not. Plain
// tracebacks (`File "path", line N, in func`) and rich's boxed ones (`│ path:N in func │`) are
// read. Internal to the doctor layer.

#include <string_view>

#include "loom/device/phase.h"

namespace loom::doctor::detail {

// The phase one traceback line names: a frame or the source line under it; Phase::kNone when it
// names none.
Phase traceback_line_phase(std::string_view line);

// Which phase wins when one traceback names several: the higher rank. Sampling runs inside the
// train loop, so its frames outrank the loop's; phases tracebacks never name rank 0.
int traceback_phase_rank(Phase p);

// A frame that moves a model onto the device: `Module.to` / `_apply` / `convert` / `cuda` in
// torch's module.py, accelerate's `prepare`, OneTrainer's `setup_train_device` and
// `transformer_to`, DeepSpeed's `_configure_distributed_model`. Placement is loading — but only
// when no other frame names a phase: trainers move modules around inside steps and samples too.
bool is_placement_frame(std::string_view line);

// A line of rich's boxed traceback ("│ ... │", "╭─ Traceback ...", "╰───╯").
bool is_rich_traceback_line(std::string_view line);

}  // namespace loom::doctor::detail
