#pragma once

// What `loom doctor` tells the user to change, in the words of the tool that wrote the log. The
// rungs, their advice and their order come from the guard's rung table
// (loom/guard/ladder_policy.h): the doctor advises by hand what loom's own recovery would do
// next. A few settings that no rung turns (skipping the baseline sample, sampling less often)
// are the doctor's own. Internal to the doctor layer.

#include <string>
#include <string_view>
#include <vector>

#include "loom/doctor/diagnosis.h"
#include "loom/guard/ladder_policy.h"

namespace loom::doctor::detail {

// The table's row for `rule`; every rule the doctor names is in the table (std::logic_error
// otherwise: a renamed rung must be renamed here too).
const guard::RungSpec& rung(std::string_view rule);

// A rung's advice as `tool` spells settings: kohya sd-scripts and PyTorch scripts by their
// command-line flags, loom and ai-toolkit (and unknown tools) by the YAML keys they share.
const std::string& rung_advice(LogTool tool, const guard::RungSpec& rung);
const std::string& rung_advice(LogTool tool, std::string_view rule);

// Settings no rung turns.
std::string skip_first_sample_advice(LogTool tool);  // no sample before training
std::string sample_every_advice(LogTool tool);       // sample less often
std::string loader_workers_advice(LogTool tool);     // fewer data-loader worker processes

// One change to advise: the rung it takes and its text.
struct Advice {
    const guard::RungSpec* rung = nullptr;
    std::string text;
};

// A training branch of the table (kTrainImage or kTrainVideo) as advice, in order, without the
// "sometimes" rung (the doctor tells that case from the log, and advises the largest bucket
// first itself), without rungs `taken` says the log shows are already taken, and each advice
// once (video frames are halved twice; the advice is the same).
template <class Taken>
std::vector<Advice> training_ladder(LogTool tool, guard::LadderBranch branch, Taken taken) {
    std::vector<Advice> out;
    for (const guard::RungSpec* r : guard::rungs_of(branch)) {
        if (r->rule == "train.sometimes_largest_bucket" || taken(*r)) continue;
        const std::string& text = rung_advice(tool, *r);
        bool seen = false;
        for (const Advice& a : out) seen = seen || a.text == text;
        if (!seen) out.push_back({r, text});
    }
    return out;
}

}  // namespace loom::doctor::detail
