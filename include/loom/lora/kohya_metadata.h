#pragma once

// The `ss_*` metadata kohya's sd-scripts writes into a LoRA file (and that ComfyUI, A1111 and
// civitai read to show how a LoRA was trained), plus ai-toolkit's `training_info`/`software` and
// the job's own `meta:` block. reference/formats.md §6.

#include <cstdint>
#include <string>

#include "loom/config/job.h"
#include "loom/io/safetensors.h"

namespace loom {

struct KohyaTrainingFacts {
    std::int64_t step = 0;                   // steps trained when the file is written
    config::Arch arch = config::Arch::kSd1;  // the loaded model's arch
    bool gradient_checkpointing = false;     // the plan's, which may differ from the job's
};

// The metadata of a LoRA file saved at `facts.step` of `process` (an entry of `job`).
SafetensorsMetadata kohya_metadata(const config::Job& job, const config::ProcessConfig& process,
                                   const KohyaTrainingFacts& facts);

}  // namespace loom
