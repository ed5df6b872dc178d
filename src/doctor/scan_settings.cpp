// What a log says about the job, for the log scanner (log_scanner.h): which tool wrote it (each
// line votes) and the memory settings it printed (config dumps, YAML, command-line flags).

#include <algorithm>
#include <vector>

#include "log_scanner.h"
#include "log_text.h"
#include "loom/guard/log_wording.h"

namespace loom::doctor::detail {

namespace {

constexpr std::size_t kMaxVideoScan = 4096;  // longer segments are progress spam, not config

}  // namespace

// ---- which tool wrote it

void LogScanner::vote_tool(std::string_view s) {
    static constexpr std::array<std::string_view, 14> kAiToolkit = {
        "# Running job:",
        "Running  1 process",
        "Running 1 job",
        "# OOM during training step",
        "times in a row, aborting training",
        "Generating baseline samples",
        "Error running job:",
        "BaseSDTrainProcess",
        "ai-toolkit",
        "ai_toolkit",
        "AI-Toolkit",
        "Job ID: \"",
        "completed jobs",
        "Generating Images"};
    static constexpr std::array<std::string_view, 10> kKohya = {
        "sd-scripts", "train_network.py", "sdxl_train",    "kohya",
        "学習開始",   "avr_loss",         "train_util.py", "prepare optimizer, data loader",
        "musubi",     "kohya_ss"};
    static constexpr std::array<std::string_view, 10> kPyTorch = {
        "Traceback (most recent call last)",
        "torch",
        "OutOfMemoryError",
        "CUDA out of memory",
        "diffusers",
        "accelerate",
        "deepspeed",
        "diffusion-pipe",
        "OneTrainer",
        "SimpleTuner"};
    static constexpr std::array<std::string_view, 3> kLoom = {"] [guard] [", "] [train] [",
                                                              guard::kPlanChangeWords};
    auto count = [&](LogTool tool, const auto& needles, int weight) {
        for (std::string_view n : needles) {
            if (contains(s, n)) votes_[static_cast<int>(tool)] += weight;
        }
    };
    count(LogTool::kAiToolkit, kAiToolkit, 1);
    count(LogTool::kKohya, kKohya, 1);
    count(LogTool::kPyTorch, kPyTorch, 1);
    count(LogTool::kLoom, kLoom, 3);
    if (guard::parse_outcome_line(s)) votes_[static_cast<int>(LogTool::kLoom)] += 3;
}

// The tool with the most votes; a plain PyTorch script only when no trainer was recognised (the
// trainers print PyTorch's tracebacks too).
LogTool LogScanner::elected_tool() const {
    const auto vote = [&](LogTool t) { return votes_[static_cast<int>(t)]; };
    LogTool tool = LogTool::kUnknown;
    for (LogTool t : {LogTool::kLoom, LogTool::kAiToolkit, LogTool::kKohya}) {
        if (vote(t) > 0 && vote(t) > vote(tool)) tool = t;
    }
    if (tool == LogTool::kUnknown && vote(LogTool::kPyTorch) > 0) tool = LogTool::kPyTorch;
    return tool;
}

// ---- settings printed in the log

void LogScanner::read_settings(std::string_view s) {
    Settings& st = settings_;
    auto note_int = [&](std::optional<Noted<std::int64_t>>& into, std::optional<std::int64_t> v,
                        const char* what) {
        if (v && (!into || *v > into->value)) into = Noted<std::int64_t>{*v, here(s, what)};
    };
    auto note_bool = [&](std::optional<Noted<bool>>& into, std::optional<bool> v,
                         const char* what) {
        if (v) into = Noted<bool>{*v, here(s, what)};
    };
    if (auto v = value_after_key(s, "batch_size"))
        note_int(st.batch_size, leading_int(*v), "batch size");
    if (auto v = value_after_key(s, "train_batch_size")) {
        note_int(st.batch_size, leading_int(*v), "batch size");
    }
    // kohya "batch size per device / バッチサイズ: 4"; diffusers "... batch size per device = 1"
    if (const std::size_t pos = s.find("batch size per device"); pos != std::string_view::npos) {
        const std::size_t sep = s.find_first_of(":=", pos);
        if (sep != std::string_view::npos) {
            note_int(st.batch_size, leading_int(trim(s.substr(sep + 1))), "batch size");
        }
    }
    if (auto v = value_after_key(s, "gradient_checkpointing")) {
        note_bool(st.gradient_checkpointing, leading_bool(*v), "gradient checkpointing");
    } else if (contains(s, "--gradient_checkpointing")) {
        note_bool(st.gradient_checkpointing, true, "gradient checkpointing");
    }
    if (auto v = value_after_key(s, "num_frames"))
        note_int(st.num_frames, leading_int(*v), "frames");
    // musubi-tuner "target_frames: (1, 45, 81)", diffusion-pipe "frame_buckets = [1, 33, 81]":
    // the longest clip sets the peak.
    for (const char* key : {"target_frames", "frame_buckets"}) {
        if (auto v = value_after_key(s, key)) {
            const std::vector<std::int64_t> frames = all_ints(*v);
            if (!frames.empty()) {
                note_int(st.num_frames, *std::max_element(frames.begin(), frames.end()), "frames");
            }
        }
    }
    if (auto v = value_after_key(s, "low_vram"))
        note_bool(st.low_vram, leading_bool(*v), "low_vram");
    if (starts_with(s, "# Running job: ")) job_name_ = std::string(trim(s.substr(15)));
    read_resolution(s);
    if (s.size() <= kMaxVideoScan) read_video_arch(s);
}

void LogScanner::read_resolution(std::string_view s) {
    Settings& st = settings_;
    auto note = [&](std::string_view values, const EvidenceLine& where) {
        for (std::int64_t r : all_ints(values)) {
            // Small numbers in the list are not resolutions (a stray index, a repeat count).
            if (r >= 64 && (!st.max_resolution || r > st.max_resolution->value)) {
                st.max_resolution = Noted<std::int64_t>{r, where};
            }
        }
    };
    if (in_resolution_list_) {
        const std::size_t close = s.find(']');
        note(s.substr(0, close), resolution_start_);
        if (close != std::string_view::npos || contains(s, ":")) in_resolution_list_ = false;
        return;
    }
    const std::optional<std::string_view> v = value_after_key(s, "resolution");
    if (!v) return;
    const std::size_t close = v->find(']');
    resolution_start_ = here(s, "resolution");
    note(v->substr(0, close), resolution_start_);
    in_resolution_list_ = starts_with(*v, "[") && close == std::string_view::npos;
}

void LogScanner::read_video_arch(std::string_view s) {
    if (settings_.video_arch) return;
    static constexpr std::array<std::string_view, 15> kVideo = {
        "wan21",       "wan22",         "wan2.1",       "wan2.2",        "wan 2.",
        "loading wan", "hunyuan_video", "hunyuanvideo", "hunyuan video", "ltx-video",
        "ltx_video",   "ltxv",          "ltx2",         "ltx-2",         "ltx 2."};
    const std::string lower = lower_ascii(s);
    for (std::string_view token : kVideo) {
        if (contains(lower, token)) {
            settings_.video_arch = here(s, "video model");
            return;
        }
    }
}

}  // namespace loom::doctor::detail
