// The perf switches on a real GPU (label `gpu`; skipped without one, run by scripts/gpu_check.sh):
// each trains the same LoRA as the plain path on CUDA, within float32 tolerance (cuDNN's
// convolution backward is not bitwise deterministic), and perf.cuda_graphs really captures.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "loom/config/load.h"
#include "loom/core/logging.h"
#include "loom/device/device.h"
#include "loom/train/trainer.h"
#include "tiny_sd.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

class GpuTrainingTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        if (cuda_device_count() == 0) return;
        root_ = fs::temp_directory_path() / ("loom_gpu_training_" + std::to_string(::getpid()));
        fs::remove_all(root_);
        testing::make_tiny_sd(root_ / "model");
        testing::make_dataset(root_ / "data", 6);
    }
    static void TearDownTestSuite() {
        if (!root_.empty()) fs::remove_all(root_);
    }
    void SetUp() override {
        if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
    }

    // 6 steps at batch 2 with accumulation 2 on cuda:0, float32; `extra` goes at process level,
    // `oom_extra` into the oom block.
    static fs::path train(const std::string& name, const std::string& extra,
                          const std::string& oom_extra = "") {
        const std::string text =
            "job: extension\nconfig:\n  name: " + name +
            "\n  process:\n    - type: sd_trainer\n      training_folder: " +
            (root_ / "runs").string() +
            "\n      device: cuda:0\n      training_seed: 5\n"
            "      network: {linear: 4, linear_alpha: 4, conv: 4, conv_alpha: 4}\n"
            "      save: {save_every: 1000, dtype: float32}\n"
            "      datasets:\n        - folder_path: " +
            (root_ / "data").string() +
            "\n          resolution: [64]\n"
            "      train:\n        steps: 6\n        lr: 3e-3\n        batch_size: 2\n"
            "        gradient_accumulation: 2\n        gradient_checkpointing: false\n"
            "        disable_sampling: true\n"
            "      model: {name_or_path: " +
            (root_ / "model").string() +
            ", arch: sd1}\n      sample: {prompts: ['x']}\n"
            "      oom: {reuse_stable: \"off\"" +
            oom_extra + "}\n" + extra;
        TrainOverrides o;
        o.progress_line = false;
        o.fresh = true;
        return train_process(config::load_job_text(text, name + ".yaml").job, 0, o).final_lora;
    }

    static inline fs::path root_;
};

constexpr double kTolerance = 1e-4;

TEST_F(GpuTrainingTest, FusedAdamWTrainsTheSameLora) {
    EXPECT_LE(testing::max_lora_difference(train("plain", ""),
                                           train("fused", "      perf: {fused_adamw: true}\n")),
              kTolerance);
}

TEST_F(GpuTrainingTest, ChannelsLastTrainsTheSameLora) {
    EXPECT_LE(testing::max_lora_difference(train("plain_cl", ""),
                                           train("cl", "      perf: {channels_last: true}\n")),
              kTolerance);
}

TEST_F(GpuTrainingTest, CudaGraphsCaptureAndTrainTheSameLora) {
    const fs::path graphed = train("graphs", "      perf: {cuda_graphs: true}\n");
    EXPECT_LE(testing::max_lora_difference(train("plain_graphs", ""), graphed), kTolerance);
    std::ifstream log(root_ / "runs" / "graphs" / "loom.log");
    const std::string text((std::istreambuf_iterator<char>(log)), {});
    EXPECT_NE(text.find("as a CUDA graph"), std::string::npos) << "no micro-batch was captured";
}

// Block streaming with the copies on a side stream: the prefetched weights are the ones each
// layer would have fetched itself (bf16 base at level 3, hence the looser tolerance).
TEST_F(GpuTrainingTest, SideStreamPrefetchTrainsTheSameLoraAtLowVram3) {
    EXPECT_LE(
        testing::max_lora_difference(
            train("lv3", "", ", low_vram_level: 3"),
            train("lv3_prefetch", "      perf: {stream_prefetch: true}\n", ", low_vram_level: 3")),
        1e-3);
}

}  // namespace
}  // namespace loom
