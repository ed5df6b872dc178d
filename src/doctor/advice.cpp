// The doctor's advice (advice.h): the guard's rung table in the tool's own words.

#include "advice.h"

#include <stdexcept>

namespace loom::doctor::detail {

namespace {

bool speaks_flags(LogTool tool) {
    return tool == LogTool::kKohya || tool == LogTool::kPyTorch;
}

}  // namespace

const guard::RungSpec& rung(std::string_view rule) {
    const guard::RungSpec* r = guard::find_rung(rule);
    if (r == nullptr) {
        throw std::logic_error("loom doctor: no rung '" + std::string(rule) +
                               "' in the ladder's rung table");
    }
    return *r;
}

const std::string& rung_advice(LogTool tool, const guard::RungSpec& r) {
    return speaks_flags(tool) ? r.flag_advice : r.advice;
}

const std::string& rung_advice(LogTool tool, std::string_view rule) {
    return rung_advice(tool, rung(rule));
}

std::string skip_first_sample_advice(LogTool tool) {
    return speaks_flags(tool) ? "no sample before training (drop `--sample_at_first`)"
                              : "`train.skip_first_sample: true`";
}

std::string sample_every_advice(LogTool tool) {
    return speaks_flags(tool) ? "sample less often (`--sample_every_n_steps`, `--validation_steps`)"
                              : "raise `sample.sample_every`";
}

std::string loader_workers_advice(LogTool tool) {
    if (tool == LogTool::kKohya)
        return "fewer data-loader workers (`--max_data_loader_n_workers=0`)";
    if (tool == LogTool::kPyTorch) {
        return "fewer data-loader workers (`--dataloader_num_workers=0`, or the script's "
               "`num_workers`)";
    }
    return "fewer data-loader worker processes (each holds its own copy of the dataset's "
           "buffers in RAM)";
}

}  // namespace loom::doctor::detail
