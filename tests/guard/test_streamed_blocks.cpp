// Level 3 streams a count of blocks (issue 64): the ladder streams the fewest blocks that cover an
// OOM's shortfall, more on a further OOM, up to every block; the count is a knob of plan.yaml,
// weighs in plan reuse's memory order, and scale-up brings the blocks back one at a time.

#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "ladder_cases.h"
#include "loom/config/load.h"
#include "loom/core/byte_size.h"
#include "loom/device/device.h"
#include "loom/guard/guard.h"
#include "loom/guard/job_with_plan.h"
#include "loom/guard/plan_reuse.h"

namespace loom::guard {
namespace {

namespace fs = std::filesystem;

// Five blocks in streaming order: two of 8 MiB, three of 4 MiB; fetching adds 1 MiB.
PolicyContext streaming_context() {
    PolicyContext c = image_context();
    c.low_vram_levels = 3;
    c.block_bytes = {8 * kMiB, 8 * kMiB, 4 * kMiB, 4 * kMiB, 4 * kMiB};
    c.stream_overhead = kMiB;
    return c;
}

Plan at_level(int level, int streamed = 0) {
    Plan p = conservative_plan();
    p.sample.enabled = false;
    p.low_vram = level;
    p.streamed_blocks = streamed;
    return p;
}

// A step that lacked `short_by` on the 96 MiB device: in use plus the failed request beyond it.
OomEvent short_by(std::uint64_t bytes, std::uint64_t request = 2 * kMiB) {
    OomEvent e = single_bucket_oom();
    e.memory.peak_allocated = 96 * kMiB + bytes - request;
    e.bytes_requested = request;
    return e;
}

TEST(StreamedBlocks, LevelThreeStreamsTheFewestBlocksThatCoverTheShortfallAndTheFetches) {
    const PolicyContext c = streaming_context();
    // 6 MiB short + 1 MiB of fetched copies: the first 8 MiB block is enough.
    Decision d = decide(at_level(2), short_by(6 * kMiB), after_steps(3), c);
    ASSERT_EQ(d.action, Decision::Action::kRetry);
    EXPECT_EQ(d.rule, "train.low_vram");
    EXPECT_EQ(d.plan.low_vram, 3);
    EXPECT_EQ(d.plan.streamed_blocks, 1);
    EXPECT_NE(d.reason.find("1 of 5 blocks stream"), std::string::npos) << d.reason;
    // 8 MiB short: 8 + 1 needs a second block.
    d = decide(at_level(2), short_by(8 * kMiB), after_steps(3), c);
    EXPECT_EQ(d.plan.streamed_blocks, 2);
    // 20 MiB short: 8 + 8 + 4 = 20 < 21, so four blocks.
    d = decide(at_level(2), short_by(20 * kMiB), after_steps(3), c);
    EXPECT_EQ(d.plan.streamed_blocks, 4);
    // More than all of them free: every block (0).
    d = decide(at_level(2), short_by(40 * kMiB), after_steps(3), c);
    EXPECT_EQ(d.plan.streamed_blocks, 0);
    EXPECT_NE(describe(d.plan).find("every block streamed"), std::string::npos);
}

TEST(StreamedBlocks, WithoutTheBlocksOrTheShortfallLevelThreeStreamsEveryBlock) {
    PolicyContext unknown = streaming_context();
    unknown.block_bytes.clear();
    EXPECT_EQ(decide(at_level(2), short_by(6 * kMiB), after_steps(3), unknown).plan.streamed_blocks,
              0);
    OomEvent no_request = short_by(6 * kMiB);
    no_request.bytes_requested.reset();
    const Decision d = decide(at_level(2), no_request, after_steps(3), streaming_context());
    EXPECT_EQ(d.plan.low_vram, 3);
    EXPECT_EQ(d.plan.streamed_blocks, 0);
}

// The cache phase lacked room for the encoders, which level 3 runs on the host: one block streams.
TEST(StreamedBlocks, AfterTheCachePhaseOneBlockStreams) {
    OomEvent cache = short_by(30 * kMiB);
    cache.phase = Phase::kCache;
    cache.work = Work::kCache;
    const Decision d = decide(at_level(2), cache, History{}, streaming_context());
    EXPECT_EQ(d.rule, "load.low_vram");
    EXPECT_EQ(d.plan.low_vram, 3);
    EXPECT_EQ(d.plan.streamed_blocks, 1);
    EXPECT_NE(d.reason.find("encoders compute on the host"), std::string::npos) << d.reason;
}

TEST(StreamedBlocks, AFurtherOomStreamsMoreBlocksUpToEveryOneThenDoesNotFit) {
    const PolicyContext c = streaming_context();
    // 2 blocks stream; 5 MiB more short: the next 4 MiB block is not enough, two are.
    Decision d = decide(at_level(3, 2), short_by(5 * kMiB), after_steps(3), c);
    ASSERT_EQ(d.action, Decision::Action::kRetry);
    EXPECT_EQ(d.rule, "train.more_streamed_blocks");
    EXPECT_EQ(d.plan.streamed_blocks, 4);
    ASSERT_EQ(d.changes.size(), 1u);
    EXPECT_EQ(d.changes[0].knob, "model.streamed_blocks");
    // A shortfall smaller than a block still streams one more.
    EXPECT_EQ(decide(at_level(3, 2), short_by(1), after_steps(3), c).plan.streamed_blocks, 3);
    // The last block: every block.
    EXPECT_EQ(decide(at_level(3, 4), short_by(kMiB), after_steps(3), c).plan.streamed_blocks, 0);
    // Without a figure: twice as many.
    OomEvent no_request = short_by(kMiB);
    no_request.bytes_requested.reset();
    EXPECT_EQ(decide(at_level(3, 1), no_request, after_steps(3), c).plan.streamed_blocks, 2);
    EXPECT_EQ(decide(at_level(3, 3), no_request, after_steps(3), c).plan.streamed_blocks, 0);
    // Every block streams: nothing is left.
    d = decide(at_level(3, 0), short_by(kMiB), after_steps(3), c);
    EXPECT_EQ(d.action, Decision::Action::kDoesNotFit);
    // A count past the blocks is every block too.
    EXPECT_EQ(decide(at_level(3, 7), short_by(kMiB), after_steps(3), c).action,
              Decision::Action::kDoesNotFit);
}

TEST(StreamedBlocks, LoadAndSaveStreamMoreBlocksToo) {
    const PolicyContext c = streaming_context();
    OomEvent load = short_by(3 * kMiB);
    load.phase = Phase::kLoad;
    load.work = Work::kLoad;
    Decision d = decide(at_level(3, 1), load, History{}, c);
    EXPECT_EQ(d.rule, "load.more_streamed_blocks");
    EXPECT_EQ(d.plan.streamed_blocks, 2);
    OomEvent save = short_by(3 * kMiB);
    save.phase = Phase::kSave;
    save.work = Work::kSave;
    History retried;
    retried.save_retries = 1;
    d = decide(at_level(3, 1), save, retried, c);
    EXPECT_EQ(d.rule, "save.more_streamed_blocks");
    EXPECT_EQ(d.plan.streamed_blocks, 2);
}

TEST(StreamedBlocks, TheCountIsAPlanYamlKnobThatOlderPlansLack) {
    const Plan p = at_level(3, 4);
    EXPECT_EQ(parse_plan(plan_to_yaml(p), "plan.yaml"), p);
    EXPECT_NE(plan_to_yaml(p).find("streamed_blocks: 4"), std::string::npos);
    std::string older = plan_to_yaml(at_level(3));
    older.erase(older.find("  streamed_blocks: 0\n"), std::string("  streamed_blocks: 0\n").size());
    EXPECT_EQ(parse_plan(older, "plan.yaml").streamed_blocks, 0);
    std::string negative = plan_to_yaml(p);
    negative.replace(negative.find("streamed_blocks: 4"), 18, "streamed_blocks: -1");
    EXPECT_THROW(parse_plan(negative, "plan.yaml"), FormatError);
    EXPECT_NE(describe(p).find("4 blocks streamed"), std::string::npos) << describe(p);
}

TEST(StreamedBlocks, MoreStreamedBlocksWeighLessAndNoneBelowLevelThree) {
    EXPECT_TRUE(no_heavier(at_level(3, 4), at_level(3, 2)));
    EXPECT_FALSE(no_heavier(at_level(3, 2), at_level(3, 4)));
    EXPECT_TRUE(no_heavier(at_level(3, 0), at_level(3, 4)));  // every block: the lightest
    EXPECT_TRUE(no_heavier(at_level(3, 1), at_level(2)));
    EXPECT_FALSE(no_heavier(at_level(2), at_level(3, 1)));
    EXPECT_EQ(lighter_of(at_level(2), at_level(3, 3)), at_level(3, 3));
    EXPECT_EQ(lighter_of(at_level(3, 3), at_level(2)), at_level(3, 3));
    EXPECT_EQ(lighter_of(at_level(3, 3), at_level(3, 0)), at_level(3, 0));
}

// Scale-up walks the streaming back one block at a time, then to level 2.
TEST(StreamedBlocks, ScaleUpBringsTheBlocksBackOneAtATime) {
    struct Target final : GuardedTarget {
        std::vector<Plan> applied;
        void release_after_oom() override {}
        void apply_plan(const Plan&, const Plan& to) override { applied.push_back(to); }
        BucketFacts bucket_facts() const override { return {}; }
    } target;
    const fs::path events_file =
        fs::temp_directory_path() / ("loom_streamed_blocks_" + std::to_string(::getpid()));
    fs::remove(events_file);
    std::unique_ptr<Device> device = open_device({DeviceKind::kSim, 0}, 96 * kMiB);
    GuardOptions options;
    options.context = streaming_context();
    options.scale_up = true;
    options.stable_after = 1;
    EventLog events(events_file);
    Guard second(*device, at_level(2), options, events);
    second.set_target(&target);
    int attempts = 0;
    // Nothing is in use on the sim device: the 12 MiB asked for is the shortfall.
    second.run(Phase::kTrainStep, 1, [&] {
        if (attempts++ == 0) {
            throw c10::OutOfMemoryError("sim out of memory. Tried to allocate 12.00 MiB");
        }
    });
    ASSERT_EQ(second.plan().low_vram, 3);
    ASSERT_EQ(second.plan().streamed_blocks, 2);  // 12 + 1 MiB: 8 + 8
    std::vector<int> counts;
    for (int step = 2; step < 6; ++step) {
        second.step_succeeded(step);
        second.maybe_scale_up(step, [](const Plan&) {});
        counts.push_back(second.plan().low_vram == 3 ? second.plan().streamed_blocks : -1);
    }
    // 2 → 1 → level 2 (no block streams), and nothing further to undo.
    EXPECT_EQ(counts, (std::vector<int>{1, -1, -1, -1}));
    EXPECT_EQ(second.plan(), at_level(2));
    fs::remove(events_file);
}

// ai-toolkit's layer offloading (and its deprecated name) starts at level 3 without a word; its
// transformer percent becomes a count once the blocks are known (Trainer::load), 0 keeps the
// plan where quantize puts it, and oom.streamed_blocks states a count.
config::LoadedJob offloading_job(const std::string& model) {
    const std::string text = R"(job: extension
config:
  name: offload
  process:
    - type: sd_trainer
      training_folder: output
      device: sim
      datasets: [{folder_path: data, resolution: [512]}]
      train: {batch_size: 1, steps: 10}
      model: )" + model + "\n";
    return config::load_job_text(text, "job.yaml");
}

TEST(StreamedBlocks, AiToolkitsLayerOffloadingStartsAtLevelThree) {
    config::LoadedJob on = offloading_job(
        "{name_or_path: model, arch: flux, layer_offloading: true, "
        "layer_offloading_transformer_percent: 0.5, layer_offloading_text_encoder_percent: 0.0}");
    for (const config::Diagnostic& w : on.warnings) {
        EXPECT_EQ(w.key_path.find("layer_offloading"), std::string::npos) << w.message;
    }
    const config::ProcessConfig& process = on.job.config.process.at(0);
    EXPECT_DOUBLE_EQ(process.model.layer_offloading_transformer_percent, 0.5);
    Plan p = plan_from_job(process);
    EXPECT_EQ(p.low_vram, 3);
    EXPECT_EQ(p.streamed_blocks, 0);  // the percent waits for the blocks
    const config::LoadedJob deprecated =
        offloading_job("{name_or_path: model, arch: flux, auto_memory: true}");
    EXPECT_EQ(plan_from_job(deprecated.job.config.process.at(0)).low_vram, 3);
    const config::LoadedJob none = offloading_job(
        "{name_or_path: model, arch: flux, quantize: true, layer_offloading: true, "
        "layer_offloading_transformer_percent: 0}");
    EXPECT_EQ(plan_from_job(none.job.config.process.at(0)).low_vram, 2);
    EXPECT_THROW(offloading_job("{name_or_path: model, arch: flux, "
                                "layer_offloading_transformer_percent: 1.5}"),
                 ConfigError);

    // A plan written into the job (loom stable export) comes back, counted blocks and all; below
    // level 3 the job's offloading is off.
    Plan counted = p;
    counted.streamed_blocks = 5;
    const config::Job with = job_with_plan(on.job, 0, counted);
    EXPECT_EQ(plan_from_job(with.config.process.at(0)), counted);
    EXPECT_DOUBLE_EQ(with.config.process.at(0).model.layer_offloading_transformer_percent, 1.0);
    Plan level2 = p;
    level2.low_vram = 2;
    EXPECT_EQ(plan_from_job(job_with_plan(on.job, 0, level2).config.process.at(0)), level2);
}

}  // namespace
}  // namespace loom::guard
