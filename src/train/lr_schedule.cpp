#include "loom/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "loom/core/error.h"

namespace loom {

double LrSchedule::lr_at(int64_t step) const {
    const double s = static_cast<double>(std::max<int64_t>(step, 0));
    const double total = static_cast<double>(std::max<int64_t>(total_steps, 1));
    if (kind == "constant_with_warmup") {
        if (warmup_steps <= 0) return base_lr;
        return base_lr * std::min(1.0, (s + 1.0) / static_cast<double>(warmup_steps));
    }
    if (kind == "cosine")
        return base_lr * (1.0 + std::cos(M_PI * std::min(s, total) / total)) / 2.0;
    if (kind == "linear") return base_lr * std::max(0.0, 1.0 - s / total);
    return base_lr;
}

LrSchedule make_lr_schedule(const std::string& kind, double base_lr, int64_t total_steps,
                            int64_t warmup_steps) {
    if (kind != "constant" && kind != "constant_with_warmup" && kind != "cosine" &&
        kind != "linear") {
        throw Error("unknown lr_scheduler '" + kind +
                    "' (constant, constant_with_warmup, cosine or linear)");
    }
    return LrSchedule{kind, base_lr, total_steps, warmup_steps};
}

}  // namespace loom
