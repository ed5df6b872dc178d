// The training loop end to end on a tiny random model and a generated dataset: the loss falls,
// files land in the run folder, and an interrupted run resumed from its checkpoint ends with the
// same LoRA as an uninterrupted one.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "loom/config/load.h"
#include "loom/core/error.h"
#include "loom/core/logging.h"
#include "loom/device/faults.h"
#include "loom/model/loading/tensor_file.h"
#include "loom/train/trainer.h"
#include "tiny_sd.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

class TrainerTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        root_ = fs::temp_directory_path() / ("loom_trainer_" + std::to_string(::getpid()));
        fs::remove_all(root_);
        testing::make_tiny_sd(root_ / "model");
        testing::make_dataset(root_ / "data", 6);
    }
    static void TearDownTestSuite() { fs::remove_all(root_); }

    static config::Job job(const std::string& name, int steps, const std::string& lr = "3e-3",
                           const std::string& network = "{linear: 4, linear_alpha: 4}",
                           const std::string& train_extra = "") {
        const std::string text =
            "job: extension\n"
            "config:\n"
            "  name: " +
            name +
            "\n"
            "  process:\n"
            "    - type: sd_trainer\n"
            "      training_folder: " +
            (root_ / "runs").string() +
            "\n"
            "      device: cpu\n"
            "      training_seed: 7\n"
            "      trigger_word: sks\n"
            "      network: " +
            network +
            "\n"
            "      save: {save_every: 3, dtype: float32, max_step_saves_to_keep: 2}\n"
            "      datasets:\n"
            "        - folder_path: " +
            (root_ / "data").string() +
            "\n"
            "          resolution: [64]\n"
            "      train:\n"
            "        steps: " +
            std::to_string(steps) +
            "\n"
            "        lr: " +
            lr +
            "\n"
            "        batch_size: 2\n"
            "        gradient_checkpointing: false\n" +
            train_extra + "      model: {name_or_path: " + (root_ / "model").string() +
            ", arch: sd1}\n"
            "      sample:\n"
            "        sampler: ddim\n"
            "        width: 64\n"
            "        height: 64\n"
            "        sample_steps: 2\n"
            "        sample_every: 1000\n"
            "        prompts: ['[trigger] square']\n";
        return config::load_job_text(text, name + ".yaml").job;
    }

    static inline fs::path root_;
};

double mean(const std::vector<double>& v, std::size_t from, std::size_t to) {
    return std::accumulate(v.begin() + static_cast<long>(from), v.begin() + static_cast<long>(to),
                           0.0) /
           static_cast<double>(to - from);
}

TEST_F(TrainerTest, LossFallsAndTheRunFolderFillsUp) {
    TrainOverrides o;
    o.progress_line = false;
    const TrainSummary s =
        train_process(job("falling", 80, "2e-2", "{linear: 8, linear_alpha: 8, conv: 4}"), 0, o);
    ASSERT_EQ(s.losses.size(), 80u);
    const double first = mean(s.losses, 0, 10);
    const double last = mean(s.losses, 70, 80);
    std::printf("mean loss: first 10 steps %.4f, last 10 steps %.4f (ratio %.3f)\n", first, last,
                last / first);
    EXPECT_LT(last, 0.8 * first);
    EXPECT_TRUE(fs::exists(s.final_lora));
    EXPECT_TRUE(fs::exists(s.run_folder / "config.yaml"));
    EXPECT_TRUE(fs::exists(s.run_folder / "loom.log"));
    // One metrics line per step, each with where its time went (the benchmarks' profile).
    std::ifstream metrics(s.run_folder / "metrics.jsonl");
    std::size_t lines = 0;
    for (std::string line; std::getline(metrics, line); ++lines) {
        const nlohmann::json m = nlohmann::json::parse(line);
        const nlohmann::json& ph = m.at("phases");
        const double sum = ph.at("data").get<double>() + ph.at("forward").get<double>() +
                           ph.at("backward").get<double>() + ph.at("optimizer").get<double>();
        EXPECT_GT(ph.at("forward").get<double>(), 0.0);
        EXPECT_GT(ph.at("backward").get<double>(), 0.0);
        EXPECT_LE(sum, m.at("step_seconds").get<double>() + 1e-6) << line;
    }
    EXPECT_EQ(lines, 80u);
    std::size_t pngs = 0;
    for (const auto& e : fs::directory_iterator(s.run_folder / "samples")) {
        pngs += e.path().extension() == ".png";
    }
    EXPECT_EQ(pngs, 4u);  // first and final sample: one image and one grid each
}

TEST_F(TrainerTest, ResumedRunMatchesAnUninterruptedOne) {
    TrainOverrides o;
    o.progress_line = false;
    const TrainSummary whole = train_process(job("whole", 8), 0, o);
    TrainOverrides stop = o;
    stop.stop_after_steps = 5;  // the last checkpoint is at step 3
    const TrainSummary first = train_process(job("split", 8), 0, stop);
    EXPECT_EQ(first.end_step, 5);
    EXPECT_TRUE(first.final_lora.empty());
    const TrainSummary second = train_process(job("split", 8), 0, o);
    EXPECT_TRUE(second.resumed);
    EXPECT_EQ(second.start_step, 3);
    EXPECT_EQ(second.end_step, 8);
    EXPECT_LE(testing::max_lora_difference(whole.final_lora, second.final_lora), 1e-5);
}

// 8-bit AdamW and Prodigy keep other state (codes and block maxima; s, p0 and d): it goes
// through the checkpoint too, and the resumed run ends on the uninterrupted one's LoRA. A
// checkpoint of one optimizer does not resume a job that names another.
TEST_F(TrainerTest, ResumedRunMatchesAnUninterruptedOneWithEachOptimizer) {
    TrainOverrides o;
    o.progress_line = false;
    for (const std::string name : {"adamw8bit", "prodigy"}) {
        const std::string extra = "        optimizer: " + name + "\n";
        const std::string lr = name == "prodigy" ? "1.0" : "3e-3";
        const TrainSummary whole =
            train_process(job("whole_" + name, 8, lr, "{linear: 4, linear_alpha: 4}", extra), 0, o);
        TrainOverrides stop = o;
        stop.stop_after_steps = 5;
        train_process(job("split_" + name, 8, lr, "{linear: 4, linear_alpha: 4}", extra), 0, stop);
        const TrainSummary second =
            train_process(job("split_" + name, 8, lr, "{linear: 4, linear_alpha: 4}", extra), 0, o);
        EXPECT_TRUE(second.resumed) << name;
        EXPECT_EQ(second.start_step, 3) << name;
        EXPECT_EQ(testing::max_lora_difference(whole.final_lora, second.final_lora), 0.0) << name;
    }
    TrainOverrides stop = o;
    stop.stop_after_steps = 4;
    train_process(
        job("switched", 8, "3e-3", "{linear: 4, linear_alpha: 4}", "        optimizer: prodigy\n"),
        0, stop);
    try {
        train_process(job("switched", 8, "3e-3"), 0, o);
        FAIL() << "a Prodigy checkpoint resumed an AdamW job";
    } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("train.optimizer changed"), std::string::npos)
            << e.what();
    }
}

// A newest checkpoint that claims to be complete but does not load (truncated by a full disk or a
// crash the marker did not see) is passed over with a warning and an event: the run resumes from
// the one before it and still ends with the uninterrupted run's LoRA.
TEST_F(TrainerTest, ATruncatedNewestCheckpointFallsBackToThePreviousOne) {
    TrainOverrides o;
    o.progress_line = false;
    const TrainSummary whole = train_process(job("whole_t", 8), 0, o);
    TrainOverrides stop = o;
    stop.stop_after_steps = 7;  // checkpoints at steps 3 and 6
    const TrainSummary first = train_process(job("truncated", 8), 0, stop);
    const fs::path newest = first.run_folder / "state" / "000000006" / "state.safetensors";
    ASSERT_TRUE(fs::exists(newest));
    fs::resize_file(newest, fs::file_size(newest) / 2);
    const TrainSummary second = train_process(job("truncated", 8), 0, o);
    EXPECT_TRUE(second.resumed);
    EXPECT_EQ(second.start_step, 3);
    EXPECT_EQ(second.end_step, 8);
    EXPECT_LE(testing::max_lora_difference(whole.final_lora, second.final_lora), 1e-5);
    std::ifstream events(second.run_folder / "events.jsonl");
    const std::string text((std::istreambuf_iterator<char>(events)),
                           std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("\"checkpoint_unreadable\""), std::string::npos);
    // With every checkpoint unreadable the run stops instead of starting over on top of them.
    for (const char* step : {"000000003", "000000006", "000000008"}) {
        const fs::path f = second.run_folder / "state" / step / "state.safetensors";
        if (fs::exists(f)) fs::resize_file(f, 10);
    }
    EXPECT_THROW(train_process(job("truncated", 8), 0, o), FormatError);
}

// Every way out of a run releases its loom.log: after the --stop-after hook (as if killed) a
// later process of the same job — or anything else this process logs — must not write into it.
TEST_F(TrainerTest, AStoppedRunReleasesItsLogFile) {
    TrainOverrides stop;
    stop.progress_line = false;
    stop.stop_after_steps = 1;
    const TrainSummary s = train_process(job("stopped", 4), 0, stop);
    EXPECT_EQ(s.end_step, 1);
    logger("train").info("after-the-stopped-run marker");
    std::ifstream in(s.run_folder / "loom.log");
    const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(log.find("step 1/4"), std::string::npos);
    EXPECT_EQ(log.find("after-the-stopped-run marker"), std::string::npos);
}

TEST_F(TrainerTest, Bf16WithEmaAccumulationAndCosineRuns) {
    TrainOverrides o;
    o.progress_line = false;
    const TrainSummary s = train_process(
        job("bf16", 4, "1e-3", "{linear: 4, linear_alpha: 4}",
            "        dtype: bf16\n        gradient_accumulation: 2\n        lr_scheduler: cosine\n"
            "        ema_config: {use_ema: true, ema_decay: 0.9}\n"),
        0, o);
    ASSERT_EQ(s.losses.size(), 4u);
    for (double l : s.losses) EXPECT_TRUE(std::isfinite(l));
    const NamedTensors lora = read_all_tensors(s.final_lora);
    ASSERT_FALSE(lora.empty());
    for (const auto& [name, t] : lora)
        EXPECT_EQ(t.scalar_type(), at::kFloat) << name;  // save.dtype
}

// perf.cuda_graphs on the CPU: no capture, but every micro-batch goes through the static buffers
// and the gradient accumulators, and the update through the device-side clipping and the fused
// kernel — what a CUDA graph replays. It must train the same LoRA as the plain path (within the
// fused kernel's rounding), with micro-batches (accumulation 2) and with gradient checkpointing.
TEST_F(TrainerTest, TheGraphedPathTrainsTheSameLora) {
    TrainOverrides o;
    o.progress_line = false;
    const std::string network = "{linear: 4, linear_alpha: 4}";
    const std::string accumulation = "        gradient_accumulation: 2\n";
    for (const bool checkpointing : {false, true}) {
        const std::string suffix = checkpointing ? "_gc" : "";
        config::Job plain = job("plain" + suffix, 4, "3e-3", network, accumulation);
        config::Job graphed = job("graphed" + suffix, 4, "3e-3", network,
                                  accumulation + "      perf: {cuda_graphs: true}\n");
        for (config::Job* j : {&plain, &graphed}) {
            j->config.process[0].train.gradient_checkpointing = checkpointing;
        }
        const TrainSummary a = train_process(plain, 0, o);
        const TrainSummary b = train_process(graphed, 0, o);
        EXPECT_LE(testing::max_lora_difference(a.final_lora, b.final_lora), 1e-5)
            << "gradient_checkpointing " << checkpointing;
    }
}

// An OOM inside a graphed micro-batch (sim): the guard frees the static buffers and accumulators
// with the rest of the failed attempt, steps down, and the run trains every step.
TEST_F(TrainerTest, TheGraphedPathRecoversFromAStepOom) {
    TrainOverrides o;
    o.progress_line = false;
    o.device = "sim";
    o.vram = std::uint64_t{4} << 30;
    fault_injector().configure(parse_faults("oom:phase=train_step:step=2:times=1"));
    const TrainSummary graphed =
        train_process(job("graphed_oom", 4, "3e-3", "{linear: 4, linear_alpha: 4}",
                          "      perf: {cuda_graphs: true}\n"),
                      0, o);
    fault_injector().clear();
    EXPECT_EQ(graphed.end_step, 4);
    std::ifstream events(graphed.run_folder / "events.jsonl");
    int ooms = 0;
    for (std::string line; std::getline(events, line);) {
        if (nlohmann::json::parse(line).value("event", "") == "oom") ++ooms;
    }
    EXPECT_EQ(ooms, 1);
    EXPECT_FALSE(graphed.final_lora.empty());
}

}  // namespace
}  // namespace loom
