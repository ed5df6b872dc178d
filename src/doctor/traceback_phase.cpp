// Phases named by tracebacks (traceback_phase.h): the innermost trainer function tells where the
// OOM happened.

#include "traceback_phase.h"

#include <algorithm>
#include <array>

#include "log_text.h"

namespace loom::doctor::detail {

namespace {

Phase function_phase(std::string_view func) {
    static constexpr std::array<std::string_view, 8> kSample = {
        "sample",          "sample_images",  "sample_images_common", "sample_image_inference",
        "generate_images", "generate_image", "log_validation",       "generate_samples"};
    static constexpr std::array<std::string_view, 8> kTrain = {
        "hook_train_loop", "backward",   "train_step",   "training_step",
        "call_unet",       "train_loop", "run_backward", "_backward"};
    if (std::find(kSample.begin(), kSample.end(), func) != kSample.end()) return Phase::kSample;
    if (starts_with(func, "cache_") || contains(func, "cache_latents")) return Phase::kCache;
    if (contains(func, "quantiz") || starts_with(func, "load_") || starts_with(func, "_load_") ||
        func == "from_pretrained") {
        return Phase::kLoad;
    }
    if (std::find(kTrain.begin(), kTrain.end(), func) != kTrain.end()) return Phase::kTrainStep;
    return Phase::kNone;
}

}  // namespace

int traceback_phase_rank(Phase p) {
    switch (p) {
        case Phase::kSample: return 4;  // sampling runs inside the train loop: it wins over it
        case Phase::kCache: return 3;
        case Phase::kLoad: return 2;
        case Phase::kTrainStep: return 1;
        default: return 0;
    }
}

Phase traceback_line_phase(std::string_view s) {
    if (starts_with(s, "File \"")) {
        const std::size_t in = s.rfind(", in ");
        if (contains(s, "/pipelines/") || contains(s, "\\pipelines\\")) return Phase::kSample;
        return in == std::string_view::npos ? Phase::kNone : function_phase(trim(s.substr(in + 5)));
    }
    if (contains(s, ".backward(")) return Phase::kTrainStep;
    if (contains(s, "self.sample(")) return Phase::kSample;
    if (contains(s, "quantize_model(") || contains(s, "load_model(")) return Phase::kLoad;
    return Phase::kNone;
}

}  // namespace loom::doctor::detail
