#pragma once

// A job with a plan written into it (`loom stable export`): the inverse of plan_from_job, so a
// stable plan becomes a job file a user can read, edit, check and train.
//
// Knobs with an ai-toolkit key go there — train.gradient_checkpointing, train.batch_size (and
// every datasets[].batch_size), train.gradient_accumulation, datasets[].num_frames,
// model.low_vram, sample width/height (and every samples[] entry capped to them),
// sample.num_frames, train.disable_sampling. The rest are loom's own keys in the oom block, the
// OomKey of their Plan::fields entry: oom.max_bucket_pixels, oom.low_vram_level,
// oom.sample_batch_prompts, oom.sample_batch_guidance, oom.host_memory_caches, oom.host_threads.
//
// plan_from_job(job_with_plan(job, i, plan).config.process[i]) == plan, for any plan whose
// effective batch, frames and sample size do not exceed the job's (as every plan the ladder
// reaches from that job).
//
// Plain C++, no torch.

#include <cstddef>

#include "loom/config/job.h"
#include "loom/guard/plan.h"

namespace loom::guard {

config::Job job_with_plan(const config::Job& job, std::size_t process_index, const Plan& plan);

}  // namespace loom::guard
