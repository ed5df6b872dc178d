#pragma once

// Progress lines: one tqdm bar update (ai-toolkit, kohya, diffusers scripts) and loom's own step
// line. The scanner counts training steps from them; which bar counts steps is its decision.
// Internal to the doctor layer.

#include <cstdint>
#include <optional>
#include <string_view>

namespace loom::doctor::detail {

// One tqdm update: "desc:  12%|█▏   | 120/1000 [02:10<15:50, 1.08s/it, lr: 1.0e-04 loss: 4.1e-01]".
// The views point into the parsed text.
struct BarUpdate {
    std::int64_t n = 0;
    std::string_view desc;     // without the trailing ':' ("Steps", a job name)
    std::string_view postfix;  // from '[' on: timings and the trainer's loss/lr
};

// The update in `s`, or nullopt when `s` has no "N%|bar| n/total" part.
std::optional<BarUpdate> parse_tqdm(std::string_view s);

// loom: "step 12/100 loss 0.1234 lr 1.00e-04 3.21 it/s mem 40.00 MiB ETA 00:00:30", alone (the
// console on a TTY) or after a log prefix ("[info] ", "2026-11-30 ... [train] [info] "). Returns
// the step number.
std::optional<std::int64_t> parse_loom_step(std::string_view s);

}  // namespace loom::doctor::detail
