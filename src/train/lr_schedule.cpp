#include "loom/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace loom {

double LrSchedule::lr_at(int64_t step) const {
    const double s = static_cast<double>(std::max<int64_t>(step, 0));
    const double total = static_cast<double>(std::max<int64_t>(total_steps, 1));
    switch (kind) {
        case config::LrScheduler::kConstant: return base_lr;
        case config::LrScheduler::kConstantWithWarmup:
            if (warmup_steps <= 0) return base_lr;
            return base_lr * std::min(1.0, (s + 1.0) / static_cast<double>(warmup_steps));
        case config::LrScheduler::kCosine:
            return base_lr * (1.0 + std::cos(M_PI * std::min(s, total) / total)) / 2.0;
        case config::LrScheduler::kLinear: return base_lr * std::max(0.0, 1.0 - s / total);
    }
    return base_lr;
}

LrSchedule make_lr_schedule(config::LrScheduler kind, double base_lr, int64_t total_steps,
                            int64_t warmup_steps) {
    return LrSchedule{kind, base_lr, total_steps, warmup_steps};
}

LrSchedule make_lr_schedule(const std::string& kind, double base_lr, int64_t total_steps,
                            int64_t warmup_steps) {
    return make_lr_schedule(config::lr_scheduler_of(kind), base_lr, total_steps, warmup_steps);
}

}  // namespace loom
