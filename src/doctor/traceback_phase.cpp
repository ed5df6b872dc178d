// Phases named by tracebacks (traceback_phase.h): the trainers' function names tell where the
// OOM happened.

#include "traceback_phase.h"

#include <algorithm>
#include <array>
#include <optional>

#include "log_text.h"

namespace loom::doctor::detail {

namespace {

constexpr std::string_view kBoxVertical = "\xE2\x94\x82";  // │
constexpr std::string_view kBoxTop = "\xE2\x95\xAD";       // ╭
constexpr std::string_view kBoxBottom = "\xE2\x95\xB0";    // ╰
constexpr std::string_view kRichMarker = "\xE2\x9D\xB1";   // ❱ (the failing source line)

template <std::size_t N>
bool one_of(std::string_view s, const std::array<std::string_view, N>& names) {
    return std::find(names.begin(), names.end(), s) != names.end();
}

Phase function_phase(std::string_view func) {
    static constexpr std::array<std::string_view, 11> kSample = {"sample",
                                                                 "sample_images",
                                                                 "sample_images_common",
                                                                 "sample_image_inference",
                                                                 "generate_images",
                                                                 "generate_image",
                                                                 "log_validation",
                                                                 "generate_samples",
                                                                 "run_validations",
                                                                 "do_inference",
                                                                 "validate"};
    static constexpr std::array<std::string_view, 18> kTrain = {
        "call_dit",       "hook_train_loop",    "backward",
        "train_step",     "training_step",      "call_unet",
        "train_loop",     "run_backward",       "_backward",
        "train_batch",    "_exec_forward_pass", "_exec_backward_pass",
        "_exec_schedule", "process_batch",      "get_noise_pred_and_target",
        "_train_step",    "train_one_step",     "forward_backward"};
    if (one_of(func, kSample) || contains(func, "sample_during") || contains(func, "__sample") ||
        contains(func, "validation")) {
        return Phase::kSample;
    }
    if ((contains(func, "cache") && !contains(func, "empty_cache")) ||
        contains(func, "compute_embeddings") || contains(func, "encode_latents")) {
        return Phase::kCache;
    }
    if (contains(func, "quantiz") || starts_with(func, "load_") || starts_with(func, "_load_") ||
        func == "from_pretrained" || func == "from_single_file" || func == "freeze") {
        return Phase::kLoad;
    }
    if (one_of(func, kTrain)) return Phase::kTrainStep;
    return Phase::kNone;
}

// The inside of a rich box line: without the borders and the spaces around them.
std::string_view rich_inner(std::string_view s) {
    s = trim(s);
    while (starts_with(s, kBoxVertical)) s = trim(s.substr(kBoxVertical.size()));
    while (s.size() >= kBoxVertical.size() &&
           s.substr(s.size() - kBoxVertical.size()) == kBoxVertical) {
        s = trim(s.substr(0, s.size() - kBoxVertical.size()));
    }
    return s;
}

struct Frame {
    std::string_view path;
    std::string_view func;
};

// `File "path", line N, in func` or rich's `path:N in func` (the path may be on the line above,
// the function on the line below: then one of them is empty).
std::optional<Frame> parse_frame(std::string_view s) {
    if (starts_with(s, "File \"")) {
        const std::size_t in = s.rfind(", in ");
        const std::string_view path = s.substr(6, s.find('"', 6) - 6);
        if (in == std::string_view::npos) return Frame{path, {}};
        return Frame{path, trim(s.substr(in + 5))};
    }
    if (!is_rich_traceback_line(s)) return std::nullopt;
    const std::string_view inner = rich_inner(s);
    const std::size_t in = inner.rfind(" in");
    if (in == std::string_view::npos || in == 0) return std::nullopt;
    std::size_t i = in;
    while (i > 0 && is_digit(inner[i - 1])) --i;
    if (i == in || i == 0 || inner[i - 1] != ':') return std::nullopt;
    const std::string_view after = inner.substr(in + 3);
    if (!after.empty() && after.front() != ' ') return std::nullopt;
    return Frame{inner.substr(0, i - 1), trim(after)};
}

bool is_identifier(std::string_view s) {
    if (s.empty() || is_digit(s.front())) return false;
    return std::all_of(s.begin(), s.end(), [](char c) { return is_word_char(c); });
}

// A rich source line ("❱ 407 │   │   sample = upsample_block(") without its gutter.
std::string_view rich_source(std::string_view inner) {
    if (starts_with(inner, kRichMarker)) inner = inner.substr(kRichMarker.size());
    while (true) {
        inner = trim(inner);
        if (!inner.empty() && is_digit(inner.front())) {
            while (!inner.empty() && is_digit(inner.front())) inner.remove_prefix(1);
        } else if (starts_with(inner, kBoxVertical)) {
            inner.remove_prefix(kBoxVertical.size());
        } else {
            return inner;
        }
    }
}

Phase source_line_phase(std::string_view s) {
    if (contains(s, ".backward(")) return Phase::kTrainStep;
    if (contains(s, "self.sample(")) return Phase::kSample;
    if (contains(s, "quantize_model(") || contains(s, "load_model(")) return Phase::kLoad;
    return Phase::kNone;
}

}  // namespace

bool is_rich_traceback_line(std::string_view s) {
    s = trim(s);
    return starts_with(s, kBoxVertical) || starts_with(s, kBoxTop) || starts_with(s, kBoxBottom);
}

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
    if (const std::optional<Frame> f = parse_frame(s)) {
        if (contains(f->path, "/pipelines/") || contains(f->path, "\\pipelines\\")) {
            return Phase::kSample;
        }
        if (contains(f->path, "/caching/") || contains(f->path, "\\caching\\"))
            return Phase::kCache;
        return function_phase(f->func);
    }
    if (is_rich_traceback_line(s)) {
        const std::string_view inner = rich_inner(s);
        // A function name alone: rich wrapped "path:N in" and put the name on the next line.
        if (is_identifier(inner)) return function_phase(inner);
        return source_line_phase(rich_source(inner));
    }
    return source_line_phase(s);
}

bool is_placement_frame(std::string_view s) {
    static constexpr std::array<std::string_view, 4> kModuleMethods = {"to", "_apply", "convert",
                                                                       "cuda"};
    static constexpr std::array<std::string_view, 10> kPlacement = {"prepare",
                                                                    "_prepare_one",
                                                                    "prepare_model",
                                                                    "_prepare_deepspeed",
                                                                    "setup_train_device",
                                                                    "transformer_to",
                                                                    "text_encoder_to",
                                                                    "vae_to",
                                                                    "unet_to",
                                                                    "_configure_distributed_model"};
    std::optional<Frame> f = parse_frame(s);
    if (!f && is_rich_traceback_line(s) && is_identifier(rich_inner(s))) {
        f = Frame{{}, rich_inner(s)};
    }
    if (!f) return false;
    if (one_of(f->func, kPlacement)) return true;
    // Module.to/_apply/convert live in torch/nn/modules/module.py; a wrapped rich frame has lost
    // its path, and "_apply"/"convert" are placement wherever they are.
    const bool module_py = contains(f->path, "module.py") || f->path.empty();
    return one_of(f->func, kModuleMethods) && (module_py || f->func != "to");
}

}  // namespace loom::doctor::detail
