#pragma once

// The job's preview samples (`sample:` block) during training: the requests (legacy `prompts`
// then `samples[]` items, "[trigger]" filled in), rendered with the LoRA at the sampling
// multiplier and the EMA weights under the plan's sampling knobs (size cap, batching), and
// written to the run folder's samples/ as one PNG per prompt plus a grid.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "loom/config/job.h"
#include "loom/guard/plan.h"
#include "loom/model/preview_sampler.h"

namespace loom {

class AssistantAdapter;
class LoRATraining;
class LowVramMode;
class RunFolder;
class ModelFamily;

// The job's previews as requests, in order.
std::vector<PreviewRequest> preview_requests(const config::ProcessConfig& process);

// What the trainer lends the previews: the model with its LoRA, the encoders' placement, the
// device, and the assistant adapter merged into the model (taken out of previews), if any.
struct PreviewModel {
    ModelFamily& model;
    LoRATraining& lora;
    LowVramMode& low_vram;
    const at::Device device;
    AssistantAdapter* assistant = nullptr;
};

// Runs `requests` under `sample_plan` (each request capped to its width/height, batching as it
// says); the LoRA's training mode, multiplier and weights are restored even when an OOM
// unwinds. Images as uint8 [H, W, 3] CPU tensors in request order.
std::vector<at::Tensor> render_previews(const PreviewModel& preview,
                                        std::vector<PreviewRequest> requests,
                                        const guard::SamplePlan& sample_plan,
                                        const config::ProcessConfig& process);

// samples/<time>__<step>_<i>.png for each image and <time>__<step>_grid.png.
// A clip (a video family's preview of more than one frame) is also written as an animated WebP
// at `fps` frames a second.
void write_previews(const RunFolder& run, std::int64_t step, const std::vector<at::Tensor>& images,
                    int fps);

}  // namespace loom
