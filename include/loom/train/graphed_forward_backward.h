#pragma once

// perf.cuda_graphs: a micro-batch's forward and backward on static buffers, one set per shape,
// so that StepGraphs (loom/device/step_graphs.h) can capture it once and replay it for every
// later micro-batch of that shape. The inputs are copied into the shape's buffers; the weighted
// loss lands in a static scalar; the gradients of the LoRA parameters are added into one static
// accumulator per parameter, which is the parameters' .grad for the step (backward adds into it,
// clipping and the optimizer read it).
// The noise and timesteps are drawn outside (on the host, per slot, as always), so a replay
// computes exactly what an eager micro-batch computes; on sim and cpu the same path runs
// eagerly (TrainingStepTest compares it with the plain path).
//
// Everything it holds — buffers, accumulators, captures — goes with clear(): after an OOM, and
// whenever the plan changes what a micro-batch computes.

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "loom/model/family.h"

namespace loom {

class DiffusionObjective;
class StepGraphs;

class GraphedForwardBackward {
  public:
    struct Inputs {
        at::Tensor noisy;  // already in the denoiser's dtype
        at::Tensor timesteps;
        StepConditioning conditioning;  // pooled and extra may be undefined
        at::Tensor target;
        double weight = 1.0;      // the micro-batch's share of the step's items
        at::Tensor loss_weights;  // each item's (weighted timesteps), or undefined
    };

    // `model` must predict capturably (ModelFamily::predict_is_capturable).
    GraphedForwardBackward(StepGraphs& graphs, ModelFamily& model,
                           const DiffusionObjective& objective, std::vector<at::Tensor> params);

    // A step begins: the accumulators go to zero and become the parameters' .grad.
    void begin_step();
    // One micro-batch under `key` (its shape and whatever of the plan changes the computation):
    // returns its weighted loss (a device scalar of its own, not the static one).
    at::Tensor run(const std::string& key, const Inputs& in);
    // The step's micro-batches are done: checks that the gradients are still the accumulators.
    void finish_step();
    // Frees every buffer, accumulator and capture.
    void clear();

  private:
    struct Static {
        Inputs in;
        at::Tensor weight;  // 0-dim float32 on the device
        at::Tensor loss;    // 0-dim, written by the work
    };
    void work(Static& s);

    StepGraphs& graphs_;
    ModelFamily& model_;
    const DiffusionObjective& objective_;
    std::vector<at::Tensor> params_;
    std::vector<at::Tensor> accumulated_;
    std::map<std::string, Static> statics_;  // node-based: a capture keeps its buffers' addresses
};

}  // namespace loom
