// Flux.1 LoRA training end to end on the simulated device, through the model-family seam: the
// tiny random Flux of tests/parity/flux_reference.py (dev: guidance embedding, T5 and CLIP-L),
// flow matching, previews, checkpoints and resume, and the ladder's rungs acting on Flux under
// real budgets. Budgets are measured, not magic numbers: each test first runs a one-step
// calibration with the probe on and reads its peak from events.jsonl.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "loom/config/load.h"
#include "loom/core/byte_size.h"
#include "loom/guard/plan.h"
#include "loom/model/loading/tensor_file.h"
#include "loom/train/trainer.h"
#include "scenario_runs.h"
#include "tiny_sd.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::change_rules;
using testing::events_named;
using testing::metric_lines;
using testing::read_events;

struct FluxJob {
    std::string name;
    int steps = 4;
    int batch = 2;
    bool checkpointing = false;
    bool probe = false;
    bool sampling = false;
    bool first_sample = false;
    int sample_size = 64;
    int save_every = 1000;
    std::string vram = "4GiB";
    std::optional<int> preset_low_vram;  // start from a plan.yaml with this low_vram level
    std::string model_keys;              // more of the model block: ", layer_offloading: true"
};

class FluxTraining : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        const char* parity = std::getenv("LOOM_PARITY_DIR");
        if (parity == nullptr || !fs::exists(fs::path(parity) / "flux" / "model_index.json")) {
            return;
        }
        model_ = fs::path(parity) / "flux";
        root_ = fs::temp_directory_path() / ("loom_flux_train_" + std::to_string(::getpid()));
        fs::remove_all(root_);
        for (int i = 0; i < 4; ++i) testing::write_square_image(root_ / "data", i, 64, 64);
    }
    static void TearDownTestSuite() {
        if (!root_.empty()) fs::remove_all(root_);
    }
    void SetUp() override {
        if (model_.empty()) {
            GTEST_SKIP() << "LOOM_PARITY_DIR has no tiny Flux (tests/parity/make_reference.py)";
        }
    }

    static config::Job job(const FluxJob& s) {
        return config::load_job_text(job_yaml(s), s.name + ".yaml").job;
    }

    static std::string job_yaml(const FluxJob& s) {
        std::ostringstream y;
        y << "job: extension\nconfig:\n  name: " << s.name << "\n  process:\n"
          << "    - type: sd_trainer\n"
          << "      training_folder: " << (root_ / "runs").string() << "\n"
          << "      device: sim\n"
          << "      training_seed: 5\n"
          << "      trigger_word: sks\n"
          << "      network: {type: lora, linear: 4, linear_alpha: 4}\n"
          << "      save: {dtype: float32, save_every: " << s.save_every << "}\n"
          << "      datasets:\n"
          << "        - folder_path: " << (root_ / "data").string() << "\n"
          << "          resolution: [64]\n"
          << "          cache_latents_to_disk: true\n"
          << "      train:\n"
          << "        steps: " << s.steps << "\n"
          << "        lr: 1e-3\n"
          << "        batch_size: " << s.batch << "\n"
          << "        noise_scheduler: flowmatch\n"
          << "        gradient_checkpointing: " << (s.checkpointing ? "true" : "false") << "\n"
          << "        disable_sampling: " << (s.sampling ? "false" : "true") << "\n"
          << "        skip_first_sample: " << (s.first_sample ? "false" : "true") << "\n"
          << "      model: {name_or_path: " << model_.string() << ", is_flux: true" << s.model_keys
          << "}\n"
          << "      sample:\n"
          << "        sampler: flowmatch\n"
          << "        sample_every: 2\n"
          << "        width: " << s.sample_size << "\n"
          << "        height: " << s.sample_size << "\n"
          << "        sample_steps: 2\n"
          << "        guidance_scale: 4\n"
          << "        prompts: ['[trigger] square', 'a blue circle']\n"
          << "      oom:\n"
          << "        vram_limit: " << s.vram << "\n"
          << "        probe: " << (s.probe ? "true" : "false") << "\n";
        return y.str();
    }

    static TrainSummary train(const FluxJob& s, bool fresh = true,
                              std::optional<std::int64_t> stop_after = std::nullopt) {
        TrainOverrides o;
        o.fresh = fresh;
        o.stop_after_steps = stop_after;
        return testing::train_scenario(job(s), run_folder(s.name), o, s.preset_low_vram);
    }

    static fs::path run_folder(const std::string& name) { return root_ / "runs" / name; }

    // The folder of a one-step run of `s` with a generous budget and the probe on; one run per
    // job, so a scenario may get the folder an earlier scenario's identical job left.
    static const fs::path& calibration_run(FluxJob s) {
        s.steps = 1;
        s.probe = true;
        s.vram = "4GiB";
        FluxJob unnamed = s;
        unnamed.name = "calibrate";
        const std::string key = job_yaml(unnamed) + "preset_low_vram: " +
                                std::to_string(s.preset_low_vram.value_or(-1));
        return calibrations_.folder(key, [&] {
            s.name = "calibrate_" + s.name;
            train(s);
            return run_folder(s.name);
        });
    }
    // The probe's peak for a training step (part "train") or a preview pass (part "sample")
    // under the plan of `s`.
    static std::uint64_t measured_peak(const FluxJob& s, const std::string& part) {
        return testing::probe_peak(calibration_run(s), part);
    }
    static std::uint64_t step_peak(const FluxJob& s) { return measured_peak(s, "train"); }
    static std::string kib(std::uint64_t bytes) { return std::to_string(bytes / 1024) + "KiB"; }

    static inline fs::path model_;
    static inline fs::path root_;
    static inline testing::CalibrationRuns calibrations_;
};

// Flow matching trains the transformer's LoRA, previews are sampled with it, the file is
// diffusers' Flux layout; a run stopped as if killed after step 3 resumes from the checkpoint at
// step 2 and ends on exactly the LoRA of the uninterrupted run.
TEST_F(FluxTraining, TrainsSamplesAndResumesExactly) {
    FluxJob s;
    s.name = "straight";
    s.save_every = 2;
    s.sampling = true;
    const TrainSummary straight = train(s);
    ASSERT_EQ(straight.end_step, 4);
    for (double loss : straight.losses) EXPECT_TRUE(std::isfinite(loss)) << loss;
    const fs::path lora = run_folder("straight") / "straight.safetensors";
    ASSERT_TRUE(fs::exists(lora));
    const NamedTensors tensors = read_all_tensors(lora);
    EXPECT_FALSE(tensors.empty());
    for (const auto& [name, tensor] : tensors) {
        EXPECT_EQ(name.rfind("transformer.", 0), 0u) << name;  // diffusers' Flux layout
    }
    std::size_t pngs = 0;
    for (const auto& f : fs::directory_iterator(run_folder("straight") / "samples")) {
        pngs += f.path().extension() == ".png";
    }
    EXPECT_EQ(pngs, 2u * 3u);  // step 2 and the end, 2 prompts + a grid each

    FluxJob k = s;
    k.name = "killed";
    k.sampling = false;  // previews draw no training randomness: the LoRA must not depend on them
    const TrainSummary first = train(k, true, 3);
    EXPECT_EQ(first.end_step, 3);
    const TrainSummary resumed = train(k, false);
    EXPECT_TRUE(resumed.resumed);
    EXPECT_EQ(resumed.start_step, 2);
    EXPECT_EQ(resumed.end_step, 4);
    ASSERT_EQ(resumed.losses.size(), 2u);
    EXPECT_DOUBLE_EQ(resumed.losses[0], straight.losses[2]);
    EXPECT_DOUBLE_EQ(resumed.losses[1], straight.losses[3]);
    EXPECT_EQ(testing::max_lora_difference(lora, run_folder("killed") / "killed.safetensors"), 0.0);
}

// A real budget between the step's peak with and without checkpointing: step 1 runs out of
// memory, the ladder turns checkpointing on (per transformer block) and step 1 is trained, not
// skipped.
TEST_F(FluxTraining, StepOomTurnsOnBlockCheckpointing) {
    FluxJob s;
    s.name = "gc";
    // The lower levels' rungs come first on a tight budget (the cache phase's T5 at 512 tokens
    // is heavier than this step): from level 3 on, checkpointing is the next rung.
    s.preset_low_vram = 3;
    FluxJob on = s;
    on.name = "gc_on";
    on.checkpointing = true;
    const std::uint64_t without = step_peak(s);
    const std::uint64_t with = step_peak(on);
    ASSERT_GT(without, with + kMiB) << "checkpointing must lower a Flux step's peak";
    s.vram = kib((without + with) / 2);
    const TrainSummary r = train(s);
    EXPECT_EQ(r.end_step, 4);
    const auto events = read_events(run_folder("gc"));
    const auto ooms = events_named(events, "oom");
    ASSERT_FALSE(ooms.empty());
    for (const json& e : ooms) {
        EXPECT_EQ(e.at("phase"), "train_step");
        EXPECT_EQ(e.at("step"), 1);
    }
    EXPECT_EQ(change_rules(events), std::vector<std::string>{"train.gradient_checkpointing"});
    const guard::Plan p = guard::load_plan(run_folder("gc") / "plan.yaml");
    EXPECT_TRUE(p.gradient_checkpointing);
    EXPECT_EQ(p.batch_size, 2);
    EXPECT_EQ(metric_lines(run_folder("gc")), 4u);  // zero steps lost
}

// With checkpointing on, batch 2 does not fit but batch 1 does: the step is trained as two
// micro-batches of one with the effective batch kept.
TEST_F(FluxTraining, StepOomGoesToBatchOneWithAccumulation) {
    FluxJob s;
    s.name = "b1";
    s.checkpointing = true;
    s.preset_low_vram = 3;
    FluxJob one = s;
    one.name = "b1_one";
    one.batch = 1;
    const std::uint64_t two_peak = step_peak(s);
    const std::uint64_t one_peak = step_peak(one);
    ASSERT_GT(two_peak, one_peak + kMiB / 2);
    s.vram = kib((two_peak + one_peak) / 2);
    const TrainSummary r = train(s);
    EXPECT_EQ(r.end_step, 4);
    const auto events = read_events(run_folder("b1"));
    EXPECT_EQ(change_rules(events), std::vector<std::string>{"train.batch_1_accumulate"});
    const guard::Plan p = guard::load_plan(run_folder("b1") / "plan.yaml");
    EXPECT_EQ(p.batch_size, 1);
    EXPECT_EQ(p.effective_batch(), 2);
    EXPECT_EQ(metric_lines(run_folder("b1")), 4u);
}

// A first preview heavier than a training step: only sampling shrinks (prompts one at a time,
// then the size), training keeps its plan, and the previews are written.
TEST_F(FluxTraining, FirstSampleOomShrinksOnlySampling) {
    FluxJob s;
    s.name = "sample";
    s.sampling = true;
    s.first_sample = true;
    s.sample_size = 128;
    s.checkpointing = true;
    s.preset_low_vram = 1;
    const std::uint64_t train_peak = measured_peak(s, "train");
    const std::uint64_t sample_peak = measured_peak(s, "sample");
    std::cout << "flux tiny, preview at 128 px: step peak " << train_peak << " bytes, preview peak "
              << sample_peak << " bytes\n";
    ASSERT_GT(sample_peak, train_peak + kMiB) << "the test needs a preview heavier than a step";
    s.vram = kib((train_peak + sample_peak) / 2);
    const TrainSummary r = train(s);
    EXPECT_EQ(r.end_step, 4);
    const auto events = read_events(run_folder("sample"));
    const auto ooms = events_named(events, "oom");
    ASSERT_FALSE(ooms.empty());
    for (const json& e : ooms) EXPECT_EQ(e.at("phase"), "first_sample") << e.dump();
    for (const std::string& rule : change_rules(events)) {
        EXPECT_EQ(rule.rfind("sample.", 0), 0u) << rule;
    }
    const guard::Plan p = guard::load_plan(run_folder("sample") / "plan.yaml");
    EXPECT_TRUE(p.sample.enabled);
    EXPECT_EQ(p.batch_size, 2);
    std::size_t pngs = 0;
    for (const auto& f : fs::directory_iterator(run_folder("sample") / "samples")) {
        pngs += f.path().extension() == ".png";
    }
    EXPECT_GE(pngs, 3u);  // the first sample's 2 previews and its grid, at least
}

// T5 dominates loading and caching: a budget the transformer's step fits in but the cache phase
// with the encoders on the device does not (T5 at 512 tokens) is met by low_vram's levels, up to
// 3, where the encoders compute on the host with one block streaming; a step that needs more
// streams more blocks (the probe's OOM), and every step is then trained.
TEST_F(FluxTraining, CachingRunsWithT5OnTheHostWhenTheDeviceIsTooSmall) {
    FluxJob s;
    s.name = "t5_host";
    s.checkpointing = true;
    s.preset_low_vram = 1;
    FluxJob streamed = s;
    streamed.name = "t5_host_lv3";
    streamed.preset_low_vram = 3;
    s.vram = kib(step_peak(streamed) + kMiB);
    const TrainSummary r = train(s);
    EXPECT_EQ(r.end_step, 4);
    const auto events = read_events(run_folder("t5_host"));
    const auto ooms = events_named(events, "oom");
    ASSERT_FALSE(ooms.empty()) << "the budget should not fit the encoders' pass on the device";
    EXPECT_EQ(ooms.front().at("phase"), "cache") << ooms.front().dump();
    const std::vector<std::string> rules = change_rules(events);
    ASSERT_FALSE(rules.empty());
    bool more = false;  // low_vram's levels, then only more blocks
    for (const std::string& rule : rules) {
        const bool is_more = rule.find("more_streamed_blocks") != std::string::npos;
        EXPECT_TRUE(is_more || (rule == "load.low_vram" && !more)) << rule;
        more = more || is_more;
    }
    const guard::Plan plan = guard::load_plan(run_folder("t5_host") / "plan.yaml");
    EXPECT_EQ(plan.low_vram, 3);
    EXPECT_EQ(metric_lines(run_folder("t5_host")), 4u);
}

// ai-toolkit's layer offloading: the run starts at level 3 with the transformer percent of the
// blocks streaming (2 double + 2 single blocks: half is 2), counted when the model is loaded and
// written to plan.yaml, and trains the same as a plan that streams those two from the start.
TEST_F(FluxTraining, LayerOffloadingStreamsItsShareOfTheBlocks) {
    FluxJob s;
    s.name = "offload";
    s.steps = 2;
    s.model_keys = ", layer_offloading: true, layer_offloading_transformer_percent: 0.5";
    const TrainSummary r = train(s);
    EXPECT_EQ(r.end_step, 2);
    const guard::Plan plan = guard::load_plan(run_folder("offload") / "plan.yaml");
    EXPECT_EQ(plan.low_vram, 3);
    EXPECT_EQ(plan.streamed_blocks, 2);
    EXPECT_TRUE(events_named(read_events(run_folder("offload")), "oom").empty());
    // A run that goes on from its plan.yaml keeps that plan's count: the percent counts blocks
    // for the job's own plan only.
    guard::Plan one = plan;
    one.streamed_blocks = 1;
    guard::save_plan(run_folder("offload") / "plan.yaml", one);
    s.steps = 3;
    EXPECT_EQ(train(s, /*fresh=*/false).end_step, 3);
    EXPECT_EQ(guard::load_plan(run_folder("offload") / "plan.yaml").streamed_blocks, 1);
}

// Each low_vram level lowers what a Flux run holds on the device between steps (metrics.jsonl's
// allocated after step 1: weights, LoRA, optimizer state): at 1 the text encoders and the VAE
// are off the device, at 2 the frozen base is in bf16, at 3 the double- and single-stream blocks
// stream from the host. The step's peak falls by half from 0 (captions encoded for each step with
// T5 on the device, as without cache_text_embeddings) to 1 (cached before step 1), and no higher
// level raises it; between 1, 2 and 3 the peaks of this tiny model differ by less than their
// run-to-run spread (a few hundred KB of weights against activations of 528 tokens), so only the
// resident memory is compared there. The figures go to docs/BENCHMARKS.md.
TEST_F(FluxTraining, EveryLowVramLevelLowersWhatTheRunHolds) {
    std::vector<std::uint64_t> peaks;
    std::vector<std::uint64_t> resident;
    for (int level = 0; level <= 3; ++level) {
        FluxJob s;
        s.name = "lv" + std::to_string(level);
        s.checkpointing = true;
        s.preset_low_vram = level;
        peaks.push_back(step_peak(s));
        std::ifstream metrics(calibration_run(s) / "metrics.jsonl");
        std::string line;
        std::getline(metrics, line);
        resident.push_back(json::parse(line).at("allocated").get<std::uint64_t>());
        std::cout << "flux tiny, batch 2 at 64 px, checkpointing: low_vram " << level
                  << " step peak " << peaks.back() << " bytes, held between steps "
                  << resident.back() << " bytes\n";
    }
    for (std::size_t i = 1; i < resident.size(); ++i) {
        EXPECT_LT(resident[i], resident[i - 1]) << "low_vram " << i;
    }
    EXPECT_LT(peaks[1], peaks[0] * 6 / 10);
    EXPECT_LT(peaks[2], peaks[1]);
    EXPECT_LT(peaks[3], peaks[1]);
}

}  // namespace
}  // namespace loom
