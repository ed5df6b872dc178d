// The OOM guard's scenarios on the simulated device, continued (the fixture and the budgets are
// test_oom_scenarios.cpp's, oom_scenarios_fixture.h): low_vram lets a job that does not fit
// train, scale-up returns to the job's plan or pins a change, host OOMs, and the stable-plan
// store's reuse across runs.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "loom/core/byte_size.h"
#include "loom/core/error.h"
#include "loom/device/faults.h"
#include "loom/guard/plan.h"
#include "loom/model/loading/tensor_file.h"
#include "oom_scenarios_fixture.h"

namespace loom::oom_scenarios {
namespace {

// low_vram: a job that does not fit without it trains to the end with it, chosen by the ladder;
// each level lowers the peak.
TEST_F(OomScenarios, LowVramLetsAJobThatDoesNotFitTrainToTheEnd) {
    JobSpec s;
    s.name = "low_vram";
    s.batch = 1;
    s.checkpointing = true;
    s.steps = 4;
    std::vector<std::uint64_t> peaks;
    for (int level = 0; level <= 3; ++level) {
        JobSpec c = s;
        c.name = "lv" + std::to_string(level);
        c.preset_low_vram = level;
        peaks.push_back(measured_peak(c, "train"));
        std::printf("low_vram %d: probe peak %.2f MiB\n", level, double(peaks.back()) / kMiB);
    }
    EXPECT_LT(peaks[1], peaks[0]);  // encoders on the host
    EXPECT_LT(peaks[2], peaks[1]);  // bf16 base weights
    EXPECT_LT(peaks[3], peaks[2]);  // block streaming
    s.vram = mib((peaks[0] + peaks[3]) / 2);
    const TrainSummary r = train(s);
    EXPECT_EQ(r.end_step, 4);
    const auto events = read_events(run_folder("low_vram"));
    const auto rules = change_rules(events);
    ASSERT_FALSE(rules.empty());
    // Every change moves low_vram only, or level 3's streamed blocks (checkpointing is on and the
    // batch is 1 already): the load rung, the free rung, the training rung, more blocks, or the
    // measured choice skipping a level.
    for (const std::string& rule : rules) {
        EXPECT_TRUE(rule == "load.low_vram" || rule == "train.low_vram" ||
                    rule == "free.encoders_off_device" || rule == "measured.fastest" ||
                    rule == "load.more_streamed_blocks" || rule == "train.more_streamed_blocks")
            << rule;
    }
    for (const json& c : events_named(events, "change")) {
        for (const json& move : c.at("changes")) {
            EXPECT_TRUE(move.at("knob") == "model.low_vram" ||
                        move.at("knob") == "model.streamed_blocks")
                << move.dump();
        }
    }
    const guard::Plan p = guard::load_plan(run_folder("low_vram") / "plan.yaml");
    EXPECT_GE(p.low_vram, 1);
    EXPECT_EQ(metric_lines(run_folder("low_vram")), 4u);
}

// Level 3 loads as it trains: the streamed block weights never visit the device, so a budget
// that holds a level-3 training step also holds loading the model (before, the whole UNet was
// placed first and the load phase ran out of memory at every low_vram level).
TEST_F(OomScenarios, LowVramLevelThreeLoadsInTheBudgetItTrainsIn) {
    JobSpec s;
    s.name = "lv3_load";
    s.batch = 1;
    s.checkpointing = true;
    s.steps = 2;
    s.preset_low_vram = 3;
    const std::uint64_t step_peak = measured_peak(s, "train");
    s.vram = mib(step_peak + step_peak / 10);
    const TrainSummary r = train(s);
    EXPECT_EQ(r.ooms, 0);
    EXPECT_EQ(r.end_step, 2);
}

// Scale-up: a run downgraded by a one-off fault returns to its original plan once stable, one
// change at a time, each checked by a probe first. The free rung (issue 22) stays: it costs no
// step time, and low_vram does not go down within a run.
TEST_F(OomScenarios, ScaleUpReturnsToTheOriginalPlanAfterAOneOffFault) {
    JobSpec s;
    s.name = "scale_up";
    s.probe = false;
    s.steps = 10;
    s.scale_up = true;
    s.stable_after = 3;
    fault_injector().configure(parse_faults("oom:phase=train_step:step=2:times=3"));
    const TrainSummary r = train(s);
    EXPECT_EQ(r.end_step, 10);
    const auto events = read_events(run_folder("scale_up"));
    EXPECT_EQ(change_rules(events),
              (std::vector<std::string>{"free.encoders_off_device", "train.gradient_checkpointing",
                                        "train.batch_1_accumulate"}));
    const auto ups = events_named(events, "scale_up");
    ASSERT_EQ(ups.size(), 2u);
    // Reverse order: the batch first, then checkpointing, each after 3 stable steps.
    EXPECT_EQ(ups[0].at("undo"), "train.batch_1_accumulate");
    EXPECT_EQ(ups[0].at("result"), "kept");
    EXPECT_EQ(ups[0].at("step"), 4);
    EXPECT_EQ(ups[1].at("undo"), "train.gradient_checkpointing");
    EXPECT_EQ(ups[1].at("result"), "kept");
    EXPECT_EQ(ups[1].at("step"), 7);
    const guard::Plan p = guard::load_plan(run_folder("scale_up") / "plan.yaml");
    guard::Plan original = guard::plan_from_job(job(s).config.process.at(0));
    original.low_vram = 1;
    EXPECT_EQ(p, original);
    EXPECT_EQ(metric_lines(run_folder("scale_up")), 10u);
}

// Scale-up pins what does not fit: with a budget that needs the downgrade, the probe of each
// undo runs out of memory, the change stays, and training goes on undisturbed.
TEST_F(OomScenarios, ScaleUpPinsAChangeWhoseProbeDoesNotFit) {
    JobSpec s;
    s.name = "scale_pin";
    s.probe = false;
    s.steps = 8;
    s.scale_up = true;
    s.stable_after = 2;
    s.vram = budget_needing_batch_one(s);
    const TrainSummary r = train(s);
    EXPECT_EQ(r.end_step, 8);
    const auto events = read_events(run_folder("scale_pin"));
    const auto ups = events_named(events, "scale_up");
    ASSERT_EQ(ups.size(), 2u);
    for (const json& e : ups) EXPECT_EQ(e.at("result"), "pinned") << e.dump();
    EXPECT_EQ(ups[0].at("undo"), "train.batch_1_accumulate");
    EXPECT_EQ(ups[1].at("undo"), "train.gradient_checkpointing");
    const guard::Plan p = guard::load_plan(run_folder("scale_pin") / "plan.yaml");
    EXPECT_TRUE(p.gradient_checkpointing);
    EXPECT_EQ(p.batch_size, 1);
    // The free rung, checkpointing, batch 1; the probes' OOMs are not ladder events.
    EXPECT_EQ(events_named(events, "oom").size(), 3u);
    EXPECT_EQ(metric_lines(run_folder("scale_pin")), 8u);
}

// Host RAM: the CPU allocator failing is not a device problem. The caches move to disk and the
// step is retried; no device knob changes.
TEST_F(OomScenarios, HostOomMovesCachesToDiskAndNeverTouchesDeviceKnobs) {
    JobSpec s;
    s.name = "host";
    s.steps = 4;
    s.probe = false;
    fault_injector().configure(parse_faults("host_oom:phase=train_step:step=1"));
    const TrainSummary r = train(s);
    EXPECT_EQ(r.end_step, 4);
    const auto events = read_events(run_folder("host"));
    const auto ooms = events_named(events, "oom");
    ASSERT_EQ(ooms.size(), 1u);
    EXPECT_EQ(ooms[0].at("kind"), "host");
    EXPECT_EQ(change_rules(events), (std::vector<std::string>{"host.caches_to_disk"}));
    const guard::Plan p = guard::load_plan(run_folder("host") / "plan.yaml");
    EXPECT_FALSE(p.host.memory_caches);
    EXPECT_FALSE(p.gradient_checkpointing);
    EXPECT_EQ(p.batch_size, 4);
    EXPECT_TRUE(fs::exists(run_folder("host") / "cache"));  // text embeddings on disk now
}

// The stable-config store (issue 8): a job that downgraded in its first run starts its second
// run (same job, new name) from the stable plan, with zero OOMs; with oom.reuse_stable: off it
// pays for them again.
TEST_F(OomScenarios, SecondRunStartsFromTheStoresStablePlanWithoutAnOom) {
    JobSpec s;
    s.name = "store_first";
    s.probe = false;
    s.steps = 3;
    s.vram = budget_needing_batch_one(s);
    MemoryPlanStore store;
    const TrainSummary first = train(s, true, &store);
    EXPECT_EQ(first.ooms, 3);  // the free rung, checkpointing, batch 1
    ASSERT_EQ(store.runs.size(), 1u);
    const MemoryPlanStore::Run recorded = store.runs[0];  // a copy: the next run adds to runs
    EXPECT_EQ(recorded.facts.name, "store_first");
    EXPECT_EQ(recorded.facts.key.arch, "sd1");
    EXPECT_EQ(recorded.facts.key.device_name, "sim");
    EXPECT_EQ(recorded.facts.key.rank, 4);
    EXPECT_EQ(recorded.facts.key.max_resolution, 64);
    EXPECT_EQ(recorded.facts.key.model_fingerprint.size(), 64u);
    EXPECT_NE(recorded.facts.job_yaml.find("store_first"), std::string::npos);
    ASSERT_EQ(recorded.ooms.size(), 3u);
    EXPECT_FALSE(recorded.ooms[0].injected);  // the budget, not a fault rule
    EXPECT_EQ(recorded.ooms[0].phase, "train_step");
    EXPECT_EQ(recorded.ooms[0].plan, recorded.facts.plan);  // the job's plan failed first
    ASSERT_EQ(recorded.stables.size(), 1u);
    const guard::Plan stable = recorded.stables[0].plan;
    EXPECT_TRUE(stable.gradient_checkpointing);
    EXPECT_EQ(stable.batch_size, 1);
    EXPECT_EQ(stable.low_vram, 1);
    EXPECT_GT(recorded.stables[0].steps_per_second, 0.0);
    ASSERT_TRUE(recorded.end);
    EXPECT_EQ(recorded.end->status, "completed");
    EXPECT_EQ(recorded.end->steps, 3);

    s.name = "store_second";
    const TrainSummary second = train(s, true, &store);
    EXPECT_EQ(second.ooms, 0);
    EXPECT_EQ(second.end_step, 3);
    EXPECT_EQ(second.reused_stable_id, 1);
    ASSERT_EQ(store.runs.size(), 2u);
    EXPECT_EQ(store.runs[1].facts.key, recorded.facts.key);
    EXPECT_EQ(store.runs[1].facts.plan, stable);
    EXPECT_EQ(guard::load_plan(run_folder("store_second") / "plan.yaml"), stable);
    EXPECT_EQ(events_named(read_events(run_folder("store_second")), "reuse").size(), 1u);
    std::ifstream log(run_folder("store_second") / "loom.log");
    const std::string text((std::istreambuf_iterator<char>(log)), {});
    EXPECT_NE(text.find("train.gradient_checkpointing: false -> true"), std::string::npos);
    EXPECT_NE(text.find("train.batch_size: 4 -> 1"), std::string::npos);

    s.name = "store_off";
    s.reuse_stable = "off";
    EXPECT_EQ(train(s, true, &store).ooms, 3);
}

// An OOM a fault rule raised is recorded as injected: it says nothing about what fits, so the
// next run of the job does not start lighter because of it.
TEST_F(OomScenarios, InjectedOomsAreRecordedButDoNotDriveReuse) {
    JobSpec s;
    s.name = "store_injected";
    s.probe = false;
    s.steps = 2;
    MemoryPlanStore store;
    fault_injector().configure(parse_faults("oom:phase=train_step:step=1:times=1"));
    EXPECT_EQ(train(s, true, &store).ooms, 1);
    fault_injector().clear();
    ASSERT_EQ(store.runs.at(0).ooms.size(), 1u);
    EXPECT_TRUE(store.runs[0].ooms[0].injected);
    s.name = "store_injected_again";
    const TrainSummary again = train(s, true, &store);
    EXPECT_FALSE(again.reused_stable_id);
    EXPECT_EQ(store.runs.at(1).facts.plan, guard::plan_from_job(job(s).config.process[0]));
}

}  // namespace
}  // namespace loom::oom_scenarios
