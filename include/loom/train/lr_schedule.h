#pragma once

// Learning-rate schedules of the job's train.lr_scheduler (pure, no torch). The schedule is a
// function of the optimizer step, so a resumed run recomputes it instead of replaying it.

#include <cstdint>
#include <string>

#include "loom/config/choices.h"

namespace loom {

struct LrSchedule {
    config::LrScheduler kind = config::LrScheduler::kConstant;
    double base_lr = 1e-4;
    int64_t total_steps = 1000;
    int64_t warmup_steps = 0;  // constant_with_warmup (ai-toolkit's default is 1000)

    // The learning rate for optimizer step `step` (0-based: the first update uses step 0).
    //   constant:              base
    //   constant_with_warmup:  base * min(1, (step + 1) / warmup)
    //   cosine:                base * (1 + cos(pi * step / total)) / 2   (torch CosineAnnealingLR,
    //                          T_max = total, eta_min = 0, as ai-toolkit builds it)
    //   linear:                base * (1 - step / total)                   (decay to 0)
    double lr_at(int64_t step) const;
};

LrSchedule make_lr_schedule(config::LrScheduler kind, double base_lr, int64_t total_steps,
                            int64_t warmup_steps);
// The same from train.lr_scheduler's word; throws loom::ConfigError for a word the schema does
// not know (ai-toolkit's schedulers loom does not implement yet run as constant).
LrSchedule make_lr_schedule(const std::string& kind, double base_lr, int64_t total_steps,
                            int64_t warmup_steps);

}  // namespace loom
