// The rung table: the one list of rungs that decide() walks and `loom doctor` advises from.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ladder_cases.h"
#include "loom/core/byte_size.h"
#include "loom/guard/ladder_policy.h"

namespace loom::guard {
namespace {

std::vector<std::string> rules_of(LadderBranch branch) {
    std::vector<std::string> out;
    for (const RungSpec* r : rungs_of(branch)) out.push_back(r->rule);
    return out;
}

TEST(RungTable, EachBranchListsTheDocumentedLadderInOrder) {
    EXPECT_EQ(
        rules_of(LadderBranch::kSampling),
        (std::vector<std::string>{"sample.one_prompt_at_a_time", "sample.sequential_guidance",
                                  "sample.halve_size", "sample.fewer_frames", "sample.disable"}));
    EXPECT_EQ(rules_of(LadderBranch::kLoadCache),
              (std::vector<std::string>{"load.low_vram", "load.more_streamed_blocks"}));
    EXPECT_EQ(rules_of(LadderBranch::kTrainImage),
              (std::vector<std::string>{"free.idle_expert_to_host", "free.encoders_off_device",
                                        "train.sometimes_largest_bucket",
                                        "train.gradient_checkpointing", "train.batch_1_accumulate",
                                        "train.drop_largest_bucket", kSamplingRungsRule,
                                        "train.low_vram", "train.more_streamed_blocks"}));
    EXPECT_EQ(
        rules_of(LadderBranch::kTrainVideo),
        (std::vector<std::string>{
            "free.idle_expert_to_host", "free.encoders_off_device",
            "train.sometimes_largest_bucket", "train.fewer_frames", "train.batch_1_accumulate",
            "train.gradient_checkpointing", "train.drop_largest_bucket", "train.fewer_frames",
            kSamplingRungsRule, "train.low_vram", "train.more_streamed_blocks"}));
    EXPECT_EQ(rules_of(LadderBranch::kSave),
              (std::vector<std::string>{"save.free_and_retry", "save.low_vram",
                                        "save.more_streamed_blocks"}));
    EXPECT_EQ(rules_of(LadderBranch::kHost),
              (std::vector<std::string>{"host.caches_to_disk", "host.fewer_threads"}));
    for (const RungSpec& r : rung_table()) {
        EXPECT_FALSE(r.reason.empty()) << r.rule;
        EXPECT_FALSE(r.advice.empty()) << r.rule;
        EXPECT_FALSE(r.flag_advice.empty()) << r.rule;
        EXPECT_EQ(find_rung(r.rule)->rule, r.rule);
    }
    EXPECT_EQ(find_rung("no.such_rule"), nullptr);
    EXPECT_STREQ(to_string(LadderBranch::kTrainVideo), "train_video");
}

// Every retry decide() returns is a row of the event's branch (a sampling row where the training
// branch has kSamplingRungsRule), with that row's reason and no knob outside the row's knobs; the
// rules come in the table's order.
void expect_walk_follows_table(Plan p, OomEvent e, History h, const PolicyContext& c) {
    const LadderBranch branch = ladder_branch(e, c);
    const std::vector<const RungSpec*> rows = rungs_of(branch);
    std::size_t at = 0;  // decisions never go back up the table
    for (int i = 0; i < 30; ++i) {
        h.failed.emplace_back(e.work, p);
        const Decision d = decide(p, e, h, c);
        if (d.action != Decision::Action::kRetry) return;
        const RungSpec* row = nullptr;
        std::string prefix;
        for (std::size_t k = at; k < rows.size() && row == nullptr; ++k) {
            if (rows[k]->rule == d.rule) {
                row = rows[k];
                at = k;
            } else if (rows[k]->rule == kSamplingRungsRule && find_rung(d.rule) != nullptr &&
                       find_rung(d.rule)->branch == LadderBranch::kSampling) {
                row = find_rung(d.rule);
                prefix = rows[k]->reason + ": ";
                at = k;
            }
        }
        ASSERT_NE(row, nullptr) << d.rule << " is not next in branch " << to_string(branch);
        EXPECT_EQ(d.reason.rfind(prefix + row->reason, 0), 0u) << d.reason;
        for (const KnobChange& k : d.changes) {
            EXPECT_NE(std::find(row->knobs.begin(), row->knobs.end(), k.knob), row->knobs.end())
                << d.rule << " changed " << k.knob;
        }
        if (e.work == Work::kSave) ++h.save_retries;
        p = d.plan;
    }
}

TEST(RungTable, DecideWalksTheTable) {
    PolicyContext c = image_context();
    c.low_vram_levels = 2;
    OomEvent train = train_oom();
    train.after_sample = true;
    expect_walk_follows_table(image_plan(), train, after_steps(3), c);
    expect_walk_follows_table(image_plan(), sample_oom(), {}, c);
    OomEvent load = train_oom();
    load.phase = Phase::kLoad;
    load.work = Work::kLoad;
    expect_walk_follows_table(image_plan(), load, {}, c);
    OomEvent save = train_oom();
    save.phase = Phase::kSave;
    save.work = Work::kSave;
    expect_walk_follows_table(image_plan(), save, after_steps(3), c);
    OomEvent host = train_oom();
    host.kind = OomKind::kHost;
    c.host_threads = 8;
    expect_walk_follows_table(image_plan(), host, {}, c);

    PolicyContext v = c;
    v.video = true;
    v.job_frames = 81;
    Plan clip = image_plan();
    clip.frames = 81;
    clip.sample.frames = 33;
    expect_walk_follows_table(clip, train, after_steps(3), v);
    expect_walk_follows_table(clip, sample_oom(), {}, v);
}

}  // namespace
}  // namespace loom::guard
