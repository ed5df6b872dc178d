// The OOM guard's scenarios A–H (issue 6) on the simulated device. Budgets are not magic
// numbers: each scenario first measures the peaks it needs (a one-step calibration run with the
// probe on and a 4 GiB budget, reading the probe's peak from events.jsonl) and sets its budget
// between them, so the scenarios keep their meaning when the tiny model changes.
//
// Each scenario asserts the sequence of events in events.jsonl, the final plan, and that
// training completes with every step trained. low_vram, scale-up and the stable-plan store
// are in test_oom_scenario_plans.cpp.

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

// A. OOM in the first sample: only sampling shrinks; training settings are untouched.
TEST_F(OomScenarios, A_FirstSampleOomShrinksOnlySampling) {
    JobSpec s;
    s.name = "a";
    s.sampling = true;
    // Training on 32x32 images and previews at 112: a preview outweighs a training step by a
    // margin (LoRA layers add their delta inside one GEMM, so a preview's attention layers hold
    // less than they once did), at a fraction of the time 160x160 previews took.
    s.data = "small_only";
    s.sample_size = 112;
    s.probe = false;  // the first sample itself must run out of memory, not the probe
    s.steps = 3;
    const std::uint64_t train_peak = measured_peak(s, "train");
    const std::uint64_t sample_peak = measured_peak(s, "sample");
    ASSERT_GT(sample_peak, train_peak + 4 * kMiB) << "the scenario needs sampling to be heavier";
    s.vram = mib((train_peak + sample_peak) / 2);
    const TrainSummary r = train(s);
    EXPECT_EQ(r.end_step, 3);
    const auto events = read_events(run_folder("a"));
    const auto ooms = events_named(events, "oom");
    ASSERT_FALSE(ooms.empty());
    for (const json& e : ooms) EXPECT_EQ(e.at("phase"), "first_sample") << e.dump();
    for (const std::string& rule : change_rules(events)) {
        EXPECT_EQ(rule.rfind("sample.", 0), 0u) << rule;
    }
    EXPECT_EQ(change_rules(events).front(), "sample.one_prompt_at_a_time");
    const guard::Plan p = guard::load_plan(run_folder("a") / "plan.yaml");
    EXPECT_FALSE(p.gradient_checkpointing);
    EXPECT_EQ(p.batch_size, 4);
    EXPECT_EQ(p.gradient_accumulation, 1);
    EXPECT_FALSE(p.max_bucket_pixels.has_value());
    EXPECT_TRUE(p.sample.enabled);
    EXPECT_EQ(metric_lines(run_folder("a")), 3u);
}

// B. OOM at step 1 with checkpointing off and batch 4: the idle encoders leave the device (the
// free rung, issue 22: latents are cached), then checkpointing on, then batch 1 with accumulation
// 4; the effective batch stays 4 and step 1 is trained, not skipped.
TEST_F(OomScenarios, B_StepOneOomTurnsOnCheckpointingThenBatchOne) {
    JobSpec s;
    s.name = "b";
    s.probe = false;
    s.vram = budget_needing_batch_one(s);
    const TrainSummary r = train(s);
    EXPECT_EQ(r.end_step, 6);
    EXPECT_EQ(r.losses.size(), 6u);
    const auto events = read_events(run_folder("b"));
    const auto ooms = events_named(events, "oom");
    ASSERT_EQ(ooms.size(), 3u);
    for (const json& e : ooms) {
        EXPECT_EQ(e.at("phase"), "train_step");
        EXPECT_EQ(e.at("step"), 1);
        EXPECT_EQ(e.at("kind"), "device");
        EXPECT_GT(e.at("bytes_requested").get<std::uint64_t>(), 0u);
    }
    EXPECT_EQ(change_rules(events),
              (std::vector<std::string>{"free.encoders_off_device", "train.gradient_checkpointing",
                                        "train.batch_1_accumulate"}));
    const guard::Plan p = guard::load_plan(run_folder("b") / "plan.yaml");
    EXPECT_EQ(p.low_vram, 1);
    EXPECT_TRUE(p.gradient_checkpointing);
    EXPECT_EQ(p.batch_size, 1);
    EXPECT_EQ(p.gradient_accumulation, 4);
    EXPECT_EQ(p.effective_batch(), 4);
    EXPECT_EQ(metric_lines(run_folder("b")), 6u);  // zero steps lost
    EXPECT_TRUE(fs::exists(run_folder("b") / "stable.yaml"));
}

// The measured choice on a real budget (issue 22): scenario B's budget with the probe on. The
// probe's OOMs are answered by measuring the candidates through the live trainer; the run ends on
// a plan that was measured to fit, trains every step, and which plan wins is the measurement's
// business (timings differ between machines), so only what must hold is asserted.
TEST_F(OomScenarios, MeasuredChoiceOnARealBudgetEndsOnAPlanMeasuredToFit) {
    JobSpec s;
    s.name = "measured";
    s.probe = true;
    s.vram = budget_needing_batch_one(s);
    const TrainSummary r = train(s);
    EXPECT_EQ(r.end_step, 6);
    EXPECT_EQ(metric_lines(run_folder("measured")), 6u);
    const auto events = read_events(run_folder("measured"));
    for (const json& e : events_named(events, "oom")) EXPECT_EQ(e.at("phase"), "probe");
    EXPECT_EQ(change_rules(events).front(), "free.encoders_off_device");
    const auto measures = events_named(events, "measure");
    ASSERT_GE(measures.size(), 2u);
    ASSERT_FALSE(events_named(events, "measured_choice").empty());
    const std::string final_plan =
        guard::describe(guard::load_plan(run_folder("measured") / "plan.yaml"));
    bool measured_to_fit = false;
    bool some_did_not_fit = false;
    for (const json& m : measures) {
        if (m.at("plan") == final_plan && m.at("fits").get<bool>()) measured_to_fit = true;
        if (!m.at("fits").get<bool>()) some_did_not_fit = true;
    }
    EXPECT_TRUE(measured_to_fit) << final_plan;
    EXPECT_TRUE(some_did_not_fit) << "the budget should rule some candidates out";
}

// C. OOM only in periodic sampling: sampling shrinks, then is disabled; training is unchanged.
TEST_F(OomScenarios, C_PeriodicSamplingShrinksThenIsDisabled) {
    JobSpec s;
    s.name = "c";
    s.sampling = true;
    s.first_sample = false;
    s.sample_every = 2;
    s.data = "small_only";  // heavier than a step by a margin, as in A
    s.sample_size = 112;
    s.probe = false;
    s.steps = 6;
    const std::uint64_t train_peak = measured_peak(s, "train");
    const std::uint64_t sample_peak = measured_peak(s, "sample");
    ASSERT_GT(sample_peak, train_peak + 4 * kMiB);
    s.vram = mib((train_peak + sample_peak) / 2);
    // Budget: the sample at step 2 does not fit and shrinks until it does.
    train(s);
    auto events = read_events(run_folder("c"));
    for (const json& e : events_named(events, "oom")) {
        EXPECT_EQ(e.at("phase"), "sample");
        EXPECT_EQ(e.at("step"), 2);
    }
    ASSERT_FALSE(change_rules(events).empty());
    for (const std::string& rule : change_rules(events)) EXPECT_EQ(rule.rfind("sample.", 0), 0u);
    // And a preview that never fits (every sampling allocation fails): disabled, loudly, and
    // training runs to the end with its settings untouched.
    s.name = "c_never";
    fault_injector().configure(parse_faults("oom:phase=sample:times=100"));
    const TrainSummary r = train(s);
    EXPECT_EQ(r.end_step, 6);
    events = read_events(run_folder("c_never"));
    const auto rules = change_rules(events);
    ASSERT_FALSE(rules.empty());
    EXPECT_EQ(rules.back(), "sample.disable");
    for (const std::string& rule : rules) EXPECT_EQ(rule.rfind("sample.", 0), 0u);
    const guard::Plan p = guard::load_plan(run_folder("c_never") / "plan.yaml");
    EXPECT_FALSE(p.sample.enabled);
    EXPECT_FALSE(p.gradient_checkpointing);
    EXPECT_EQ(p.batch_size, 4);
    EXPECT_EQ(metric_lines(run_folder("c_never")), 6u);
}

// D. One rare large bucket. With the probe, the top bucket goes before step 1; without it, the
// first large-bucket batch runs out of memory, the bucket is dropped, its item trains one size
// down, and no step is lost. The idle encoders leave the device first (the free rung, issue 22);
// that alone does not make the large bucket fit.
TEST_F(OomScenarios, D_RareLargeBucketIsDroppedWithoutLosingAStep) {
    JobSpec s;
    s.name = "d";
    s.data = "rare";
    s.batch = 1;
    s.checkpointing = true;
    s.steps = 10;
    JobSpec small = s;
    small.name = "d_small";
    small.data = "small_only";
    JobSpec large_on_host = s;
    large_on_host.name = "d_host";
    large_on_host.preset_low_vram = 1;
    const std::uint64_t large_peak = measured_peak(s, "train");
    const std::uint64_t small_peak = measured_peak(small, "train");
    ASSERT_GT(large_peak, small_peak + kMiB);
    const std::uint64_t budget = (large_peak + small_peak) / 2;
    ASSERT_GT(measured_peak(large_on_host, "train"), budget)
        << "the scenario needs the large bucket not to fit with the encoders on the host either";
    s.vram = mib(budget);

    const TrainSummary with_probe = train(s);
    EXPECT_EQ(with_probe.end_step, 10);
    auto events = read_events(run_folder("d"));
    auto ooms = events_named(events, "oom");
    ASSERT_EQ(ooms.size(), 2u);
    for (const json& e : ooms) {
        EXPECT_EQ(e.at("phase"), "probe");
        EXPECT_EQ(e.at("bucket"), "64x64");
    }
    // The free rung, then the bucket. After the bucket (a rung that changes what is trained) the
    // probe measures the plans around the new one (issue 22); on sim its clock is the modelled
    // one (device/step_clock.h), by which a higher low_vram level costs more time than it
    // saves here: the plan stays as the bucket rung left it. The bucket stays dropped.
    const std::vector<std::string> probe_rules = change_rules(events);
    EXPECT_EQ(probe_rules,
              (std::vector<std::string>{"free.encoders_off_device", "train.drop_largest_bucket"}));
    ASSERT_FALSE(events_named(events, "measure").empty());
    for (const json& m : events_named(events, "measure")) {
        EXPECT_EQ(m.at("clock"), "sim model");
    }
    EXPECT_EQ(guard::load_plan(run_folder("d") / "plan.yaml").max_bucket_pixels, 32 * 32);
    EXPECT_EQ(metric_lines(run_folder("d")), 10u);

    s.name = "d_no_probe";
    s.probe = false;
    const TrainSummary without = train(s);
    EXPECT_EQ(without.end_step, 10);
    EXPECT_EQ(without.losses.size(), 10u);
    events = read_events(run_folder("d_no_probe"));
    ooms = events_named(events, "oom");
    ASSERT_EQ(ooms.size(), 2u);
    for (const json& e : ooms) {
        EXPECT_EQ(e.at("phase"), "train_step");
        EXPECT_EQ(e.at("bucket"), "64x64");
    }
    const auto rules = change_rules(events);
    ASSERT_EQ(rules.size(), 2u);
    EXPECT_EQ(rules[0], "free.encoders_off_device");
    // After smaller buckets trained it is the "sometimes" rule; at step 1 the plain order gets
    // there too (checkpointing is on and the batch is 1 already).
    if (ooms[1].at("step").get<int>() > 1) {
        EXPECT_EQ(rules[1], "train.sometimes_largest_bucket");
    } else {
        EXPECT_EQ(rules[1], "train.drop_largest_bucket");
    }
    // Every step is in metrics.jsonl, and the large image trained at 32x32 in the failed step.
    std::ifstream metrics(run_folder("d_no_probe") / "metrics.jsonl");
    std::vector<json> lines;
    for (std::string line; std::getline(metrics, line);) lines.push_back(json::parse(line));
    ASSERT_EQ(lines.size(), 10u);
    for (std::size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i].at("step"), int(i) + 1);
}

// E. A dirty device: the worker-state error at once — before any retry and before the model
// takes memory (no OOM, no plan change, no probe).
TEST_F(OomScenarios, E_DirtyDeviceIsAWorkerStateErrorAtOnce) {
    fault_injector().configure(parse_faults("dirty"));
    JobSpec s;
    s.name = "e";
    try {
        train(s);
        FAIL() << "expected a worker-state error";
    } catch (const WorkerStateError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("0 bytes free"), std::string::npos) << m;
        EXPECT_NE(m.find("fresh worker"), std::string::npos) << m;
    }
    const auto events = read_events(run_folder("e"));
    EXPECT_TRUE(events_named(events, "oom").empty());  // no retry loop
    EXPECT_TRUE(events_named(events, "change").empty());
    EXPECT_TRUE(events_named(events, "probe").empty());
    ASSERT_EQ(events_named(events, "worker_state").size(), 1u);
}

// F. A budget below the model's weights: the ladder tries every low_vram level for the load,
// then the step's rungs, then says "does not fit", with the smallest plan tried.
TEST_F(OomScenarios, F_BudgetBelowTheWeightsDoesNotFit) {
    JobSpec s;
    s.name = "f";
    s.vram = "1MiB";
    try {
        train(s);
        FAIL() << "expected does-not-fit";
    } catch (const DoesNotFitError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("smallest plan tried"), std::string::npos) << m;
        EXPECT_NE(m.find("of 1.00 MiB"), std::string::npos) << m;
        EXPECT_NE(m.find("low_vram 3"), std::string::npos) << m;
        EXPECT_NE(m.find("every block streamed"), std::string::npos) << m;
    }
    const auto events = read_events(run_folder("f"));
    const auto ooms = events_named(events, "oom");
    ASSERT_GE(ooms.size(), 6u);
    for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(ooms[i].at("phase"), "load");
    // At level 3 the streamed block weights stay on the host, so the load itself fits once
    // enough blocks stream, and the encoders compute on the host, so the cache phase does too;
    // what does not is a training step, with every rung tried — up to every block streaming.
    bool probing = false;
    for (const json& e : ooms) {
        probing = probing || e.at("phase") == "probe";
        EXPECT_EQ(e.at("phase"), probing ? "probe" : "load") << e.dump();
    }
    const std::vector<std::string> rules = change_rules(events);
    ASSERT_GE(rules.size(), 5u);
    EXPECT_EQ(std::vector<std::string>(rules.begin(), rules.begin() + 3),
              (std::vector<std::string>{"load.low_vram", "load.low_vram", "load.low_vram"}));
    std::vector<std::string> rest;  // the load's more blocks aside
    for (std::size_t i = 3; i < rules.size(); ++i) {
        if (rules[i] != "load.more_streamed_blocks") rest.push_back(rules[i]);
    }
    ASSERT_GE(rest.size(), 2u);
    EXPECT_EQ(rest[0], "train.gradient_checkpointing");
    EXPECT_EQ(rest[1], "train.batch_1_accumulate");
    for (std::size_t i = 2; i < rest.size(); ++i) EXPECT_EQ(rest[i], "train.more_streamed_blocks");
    EXPECT_EQ(guard::load_plan(run_folder("f") / "plan.yaml").streamed_blocks, 0);  // every one
    EXPECT_EQ(events_named(events, "does_not_fit").size(), 1u);
}

// G. Transparency: injected training-step OOMs change how a step is computed, never what it
// computes: the LoRA ends within 1e-5 of a clean run that used the final plan from the start.
TEST_F(OomScenarios, G_RecoveredRunEqualsACleanRunOnTheFinalPlan) {
    JobSpec s;
    s.name = "g";
    s.steps = 6;
    s.probe = false;
    // Three OOMs: the free rung (issue 22) takes the first, then checkpointing and batch 1.
    fault_injector().configure(parse_faults("oom:phase=train_step:step=3:times=3"));
    const TrainSummary faulty = train(s);
    fault_injector().clear();
    EXPECT_EQ(faulty.ooms, 3);
    EXPECT_EQ(change_rules(read_events(run_folder("g"))),
              (std::vector<std::string>{"free.encoders_off_device", "train.gradient_checkpointing",
                                        "train.batch_1_accumulate"}));
    const guard::Plan final_plan = guard::load_plan(run_folder("g") / "plan.yaml");

    s.name = "g_clean";
    fs::remove_all(run_folder("g_clean"));
    fs::create_directories(run_folder("g_clean"));
    guard::save_plan(run_folder("g_clean") / "plan.yaml", final_plan);
    const TrainSummary clean = train(s, /*fresh=*/false);
    EXPECT_EQ(clean.ooms, 0);
    const double worst = testing::max_lora_difference(faulty.final_lora, clean.final_lora);
    std::printf("largest LoRA difference, recovered vs clean run: %.3g\n", worst);
    EXPECT_LE(worst, 1e-5);
    // And the LoRA did train (the comparison is not between two untouched initialisations).
    double moved = 0;
    for (const auto& [name, t] : read_all_tensors(faulty.final_lora)) {
        if (name.find("lora_up") != std::string::npos) moved += t.abs().sum().item<double>();
    }
    EXPECT_GT(moved, 0.0);
}

// H. Killed after a downgrade and rerun: it starts from the downgraded plan with no repeated OOM.
TEST_F(OomScenarios, H_RerunStartsFromTheDowngradedPlan) {
    JobSpec s;
    s.name = "h";
    s.probe = false;
    s.steps = 6;
    s.save_every = 2;
    // Two OOMs: the free rung (issue 22) takes the first, checkpointing the second.
    fault_injector().configure(parse_faults("oom:phase=train_step:step=1:times=2"));
    TrainOverrides o;
    o.progress_line = false;
    o.fresh = true;
    o.stop_after_steps = 3;  // as if killed after step 3 (checkpoint at step 2)
    const TrainSummary first = train_process(job(s), 0, o);
    fault_injector().clear();
    EXPECT_EQ(first.ooms, 2);
    EXPECT_EQ(first.end_step, 3);
    const std::size_t events_before = read_events(run_folder("h")).size();

    const TrainSummary second = train(s, /*fresh=*/false);
    EXPECT_TRUE(second.resumed);
    EXPECT_EQ(second.start_step, 2);
    EXPECT_EQ(second.end_step, 6);
    EXPECT_EQ(second.ooms, 0);
    const auto events = read_events(run_folder("h"));
    const std::vector<json> rerun(events.begin() + long(events_before), events.end());
    EXPECT_TRUE(events_named(rerun, "oom").empty());
    ASSERT_FALSE(rerun.empty());
    EXPECT_NE(rerun.front().at("plan").get<std::string>().find("gradient_checkpointing true"),
              std::string::npos);
    EXPECT_NE(rerun.front().at("plan").get<std::string>().find("low_vram 1"), std::string::npos);
    std::ifstream log(run_folder("h") / "loom.log");
    const std::string text((std::istreambuf_iterator<char>(log)), {});
    EXPECT_NE(text.find("starting from the persisted plan"), std::string::npos);
}

}  // namespace
}  // namespace loom::oom_scenarios
