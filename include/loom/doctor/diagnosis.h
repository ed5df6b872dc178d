#pragma once

// `loom doctor`: reads a training log — loom's own (console output, loom.log, events.jsonl), or
// one written by ai-toolkit, kohya sd-scripts or a plain PyTorch script — and says which case of
// the user guide's "diagnostic by moment of the crash" table it shows (reference/oom-guide.txt
// §4, §5), with the lines that prove it and the first change to make.
//
// Pure text analysis: no torch, no device. loom's own lines are read through the guard's log
// wording (loom/guard/log_wording.h), and the changes it advises, in their order, come from the
// guard's rung table (loom/guard/ladder_policy.h), so the doctor and the recovery engine agree.
// Lines are read one at a time, so a multi-megabyte log costs one pass and memory for the few
// lines kept as evidence. Thread-safe (no shared state).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom::doctor {

// The guide's cases. The ids (to_string) are stable: tests and scripts match on them.
enum class LogCase {
    kNoOom,         // "no_oom": the log shows no out-of-memory error
    kBeforeStep1,   // "before_step_1": model load/quantize/caching, or the baseline sample
    kEarlySteps,    // "early_steps": training steps 1-10
    kSamplingOnly,  // "sampling_only": training steps succeed, preview sampling OOMs
    kSometimes,     // "sometimes": scattered OOMs after successful steps (a borderline config)
    kVideoFrames,   // "video_frames": a video model (num_frames > 1) OOMing in training
    kWorkerState,   // "worker_state": the GPU/worker, not (only) the config
    kHostRam,       // "host_ram": host RAM ran out (the kernel's OOM killer, `Killed`, exit 137,
                    // the CPU allocator), not the GPU: the device ladder does not apply
};
const char* to_string(LogCase c);

// Which program wrote the log.
enum class LogTool { kUnknown, kLoom, kAiToolkit, kPyTorch, kKohya };
const char* to_string(LogTool tool);  // "unknown", "loom", "ai-toolkit", "pytorch", "kohya"

// One line of the log that the diagnosis rests on.
struct EvidenceLine {
    std::size_t line = 0;  // 1-based line number in the file
    std::string text;      // the line (one \r-separated tqdm update of it), valid UTF-8, trimmed
    std::string note;      // why it matters ("first OOM (train_step, step 2)", ...)
};

// Figures from an out-of-memory message, in bytes. Both PyTorch wordings are read (≤ 2.0:
// "(GPU 0; T total capacity; A already allocated; F free; R reserved in total by PyTorch)";
// 2.1+: "GPU 0 has a total capacity of T of which F is free. ... Of the allocated memory A is
// allocated by PyTorch, and B is reserved by PyTorch but unallocated"), loom's sim budget
// message and loom's events.
struct OomFigures {
    std::optional<std::uint64_t> requested;             // "Tried to allocate X"
    std::optional<std::uint64_t> free;                  // free on the device
    std::optional<std::uint64_t> total;                 // capacity (loom sim: the budget)
    std::optional<std::uint64_t> allocated;             // allocated by PyTorch (tensors)
    std::optional<std::uint64_t> reserved;              // reserved in total by PyTorch
    std::optional<std::uint64_t> reserved_unallocated;  // reserved by PyTorch but unallocated
    std::optional<std::uint64_t> this_process;          // "this process has X memory in use"
    struct Process {
        std::string pid;
        std::uint64_t bytes = 0;
    };
    std::vector<Process> processes;  // "Process N has X memory in use" (may include this one)
    std::size_t line = 0;            // where they were read; 0 when there are none

    bool empty() const { return line == 0; }
};

// A memory setting loom changed by itself while recovering ("plan change" lines, "change" events).
struct LoomChange {
    std::size_t line = 0;
    std::string knob;  // "train.gradient_checkpointing"
    std::string from;
    std::string to;
    std::string rule;    // the ladder rule that chose it
    std::string reason;  // loom's one-sentence why, when the log has it
    std::string phase;   // the phase of the OOM it answered, when known
    std::optional<std::int64_t> step;
};

struct Diagnosis {
    std::string source_name;  // the file name as given
    LogTool tool = LogTool::kUnknown;
    std::size_t line_count = 0;

    LogCase log_case = LogCase::kNoOom;
    std::string title;         // one line: what happened
    std::string moment;        // before_step_1 only: "load", "cache", "first_sample" or ""
    std::string phase;         // where the first OOM happened: "load", "cache", "first_sample",
                               // "sample", "train_step", "save", "probe", or "unknown"
    std::string cause;         // the guide's "most likely cause" for the case
    std::string reason;        // why this case: the facts read from the log
    std::string first_change;  // the first change to make, as the guide's table says
    std::vector<std::string> further_changes;  // then these, one at a time, in order

    std::optional<std::int64_t> oom_step;  // training step of the first training-step OOM
    std::size_t oom_count = 0;             // distinct OOMs (a message repeated by a traceback
                                           // counts once)
    std::vector<EvidenceLine> evidence;    // in line order
    OomFigures figures;                    // of the first OOM that printed any

    std::vector<LoomChange> loom_changes;  // loom logs: what loom already changed, in order
    std::string loom_outcome;              // loom logs: "does not fit: ...", "worker state: ...",
                                           // "host memory: ...", or ""
    std::string loom_recovered;            // loom logs of a run that finished after recovering: "1
                                 // out-of-memory errors recovered, 1 plan changes, 0 steps
                                 // lost", or ""

    bool found_oom() const { return log_case != LogCase::kNoOom; }
};

// Diagnoses a whole log held in memory. `source_name` is only echoed in the output: the format
// is recognised from the lines themselves.
Diagnosis diagnose_log(std::string_view text, std::string_view source_name);

// Reads `path` line by line and diagnoses it. Throws loom::IoError when it cannot be read.
Diagnosis diagnose_log_file(const std::filesystem::path& path);

// The diagnosis for a terminal: case, why, first change, evidence with line numbers, figures,
// and loom's own changes.
std::string render(const Diagnosis& d);

// The same as one JSON object (sizes in bytes), for scripts.
std::string render_json(const Diagnosis& d);

}  // namespace loom::doctor
