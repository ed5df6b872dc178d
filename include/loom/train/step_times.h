#pragma once

// Where a training step's wall time goes, written with every metrics.jsonl line ("phases") so a
// run profiles itself: what is the model's compute (forward, backward, the optimizer) and what is
// loom's own (assembling the batch from the caches, and — from the gap between two lines'
// "time" and the step's "step_seconds" — the metrics, logging and the guard's bookkeeping).
// Host time: on an asynchronous device a phase ends when its work is queued, and the step's one
// synchronisation (the loss read-back) lands in the optimizer phase.

#include <chrono>

namespace loom {

struct StepTimes {
    double data = 0.0;       // drawing the batch, cache look-ups, stacking, copies to the device
    double forward = 0.0;    // noise, timesteps and the UNet forward with the loss
    double backward = 0.0;   // autograd
    double optimizer = 0.0;  // clipping, the AdamW update, EMA, the loss read-back
    // Several ranks: asking the group whether every rank got through its backward pass, the
    // gradients' and loss's all-reduce, and the host copy that can undo the update (waiting
    // for a slower rank counts here). 0 for one process.
    double sync = 0.0;
};

// Adds the scope's duration to one StepTimes field.
class PhaseTimer {
  public:
    explicit PhaseTimer(double& into) : into_(into), start_(std::chrono::steady_clock::now()) {}
    ~PhaseTimer() {
        into_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    }
    PhaseTimer(const PhaseTimer&) = delete;
    PhaseTimer& operator=(const PhaseTimer&) = delete;

  private:
    double& into_;
    std::chrono::steady_clock::time_point start_;
};

}  // namespace loom
