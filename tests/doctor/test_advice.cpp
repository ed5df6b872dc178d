// The doctor advises from the guard's rung table (loom/guard/ladder_policy.h): the changes, in
// the order loom's own ladder takes them, in the words of the tool that wrote the log; video
// frames halved with guard::halve_frames; "loom already made this change" when loom turned a
// knob of the rung the first change takes.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "loom/doctor/diagnosis.h"
#include "loom/guard/ladder_policy.h"

namespace loom::doctor {
namespace {

// The branch's advice as the doctor gives it: without the "sometimes" rung and the free rungs
// (loom's own run-time moves, which depend on what a run caches), each text once.
std::vector<std::string> table_advice(guard::LadderBranch branch, bool flags) {
    std::vector<std::string> out;
    for (const guard::RungSpec* r : guard::rungs_of(branch)) {
        if (r->rule == "train.sometimes_largest_bucket" || r->free) continue;
        const std::string& text = flags ? r->flag_advice : r->advice;
        if (std::find(out.begin(), out.end(), text) == out.end()) out.push_back(text);
    }
    return out;
}

std::vector<std::string> all_changes(const Diagnosis& d) {
    std::vector<std::string> out{d.first_change};
    out.insert(out.end(), d.further_changes.begin(), d.further_changes.end());
    return out;
}

TEST(DoctorAdvice, EarlyStepsFollowTheImageLadderOfTheTable) {
    // Checkpointing off and batch 2 in this log: the whole image ladder applies.
    const Diagnosis d = diagnose_log_file("tests/doctor/logs/aitk_step2_oom_loop.log");
    ASSERT_EQ(to_string(d.log_case), std::string("early_steps"));
    EXPECT_EQ(all_changes(d), table_advice(guard::LadderBranch::kTrainImage, false));
}

TEST(DoctorAdvice, FlagToolsGetTheTablesFlagAdvice) {
    // kohya with --gradient_checkpointing on: that rung is skipped, the rest is the table's.
    const Diagnosis d = diagnose_log_file("tests/doctor/logs/kohya_step1_oom.log");
    std::vector<std::string> want = table_advice(guard::LadderBranch::kTrainImage, true);
    want.erase(want.begin());  // checkpointing, already on
    EXPECT_EQ(all_changes(d), want);
}

TEST(DoctorAdvice, VideoFollowsTheVideoLadderAndHalvesFramesLikeTheGuard) {
    const Diagnosis d = diagnose_log(R"(# Running job: clip
"datasets": [ { "num_frames": 33, "resolution": [ 512 ] } ],
"train": { "batch_size": 2, "gradient_checkpointing": false },
"model": { "name_or_path": "Wan-AI/Wan2.1-T2V-1.3B-Diffusers", "arch": "wan21" },
clip:   0%|          | 0/100 [00:00<?, ?it/s]
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.55 GiB of which 1.00 GiB is free. Of the allocated memory 21.80 GiB is allocated by PyTorch, and 20.00 MiB is reserved by PyTorch but unallocated.
)",
                                     "clip.log");
    ASSERT_EQ(to_string(d.log_case), std::string("video_frames"));
    std::vector<std::string> want = table_advice(guard::LadderBranch::kTrainVideo, false);
    ASSERT_EQ(want.front(), guard::find_rung("train.fewer_frames")->advice);
    want.front() += ", e.g. 33 -> " + std::to_string(guard::halve_frames(33)) + " (keep 4k+1)";
    want.push_back("do not start with the optimizer or the learning rate");
    EXPECT_EQ(all_changes(d), want);
    EXPECT_NE(d.first_change.find("33 -> 17 (keep 4k+1)"), std::string::npos) << d.first_change;
}

TEST(DoctorAdvice, LoomAlreadyTookTheFirstChangesRung) {
    // loom dropped the largest bucket (rule train.sometimes_largest_bucket, knob
    // datasets.max_bucket_pixels): the rung the first change names.
    const Diagnosis d = diagnose_log_file("tests/doctor/logs/loom_real_console.log");
    EXPECT_EQ(d.first_change, guard::find_rung("train.sometimes_largest_bucket")->advice +
                                  " and run until stable (loom already made this change, line 14)");
}

}  // namespace
}  // namespace loom::doctor
