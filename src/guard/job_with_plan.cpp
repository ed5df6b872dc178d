#include "loom/guard/job_with_plan.h"

#include <algorithm>

#include "loom/config/arch.h"
#include "loom/core/error.h"

namespace loom::guard {

config::Job job_with_plan(const config::Job& job, std::size_t process_index, const Plan& plan) {
    if (process_index >= job.config.process.size()) {
        throw Error("job_with_plan: the job has " + std::to_string(job.config.process.size()) +
                    " process entries, not " + std::to_string(process_index + 1));
    }
    config::Job out = job;
    config::ProcessConfig& p = out.config.process[process_index];

    // Knobs without an ai-toolkit key: loom's oom block, as Plan::fields names them.
    for_each_knob([&](const Knob&, const auto& field) {
        if (field.oom) p.oom.*field.oom = field.of(plan);
    });

    p.train.gradient_checkpointing = plan.gradient_checkpointing;
    p.train.batch_size = plan.batch_size;
    p.train.gradient_accumulation = plan.gradient_accumulation;
    for (config::DatasetConfig& d : p.datasets) {
        if (d.batch_size) d.batch_size = plan.batch_size;
        d.num_frames = std::min(d.num_frames, plan.frames);
    }

    // model.low_vram / model.quantize are what ai-toolkit users know; the level
    // (oom.low_vram_level, written above) says exactly which sub-modes (quantize only ever means
    // level 2 or more).
    p.model.low_vram = plan.low_vram >= 1;
    // ai-toolkit's low_vram also keeps a Wan 2.2 expert on the host (plan_from_job reads it so):
    // a plan at a level that keeps both experts on the device says its level in
    // oom.low_vram_level alone.
    const bool experts =
        p.choices.arch && config::expert_count(config::arch_info(*p.choices.arch).family) > 1;
    if (experts && !plan.idle_expert_on_host) p.model.low_vram = false;
    if (plan.low_vram < 2) p.model.quantize = false;
    // ai-toolkit's layer offloading starts at level 3; the plan's count is oom.streamed_blocks.
    if (plan.low_vram < 3) p.model.layer_offloading = false;
    p.model.layer_offloading_transformer_percent = 1.0;
    // The qtypes as loom names them (a word loom replaced, "uint3", is written as what it used).
    p.model.qtype = config::to_string(plan.qtype);
    p.model.quantize_te = plan.qtype_te.has_value();
    if (plan.qtype_te) p.model.qtype_te = config::to_string(*plan.qtype_te);

    config::SampleConfig& s = p.sample;
    const bool has_prompts = !s.prompts.empty() || !s.samples.empty();
    if (has_prompts) p.train.disable_sampling = !plan.sample.enabled;
    s.width = plan.sample.width;
    s.height = plan.sample.height;
    for (config::SampleItem& item : s.samples) {
        if (item.width) item.width = std::min(*item.width, plan.sample.width);
        if (item.height) item.height = std::min(*item.height, plan.sample.height);
    }
    s.num_frames = plan.sample.frames;
    return out;
}

}  // namespace loom::guard
