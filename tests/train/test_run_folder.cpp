#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "loom/train/run_folder.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

class RunFolderTest : public ::testing::Test {
  protected:
    void SetUp() override {
        base = fs::temp_directory_path() / ("loom_run_" + std::to_string(::getpid()));
        fs::remove_all(base);
    }
    void TearDown() override { fs::remove_all(base); }
    fs::path base;
};

TEST_F(RunFolderTest, NamesFollowAiToolkit) {
    RunFolder run(base, "my_lora");
    EXPECT_EQ(run.step_lora(250).filename(), "my_lora_000000250.safetensors");
    EXPECT_EQ(run.final_lora().filename(), "my_lora.safetensors");
    EXPECT_EQ(run.checkpoint_dir(7).filename(), "000000007");
    EXPECT_EQ(step_label(123456789), "123456789");
}

TEST_F(RunFolderTest, OnlyCompleteCheckpointsCount) {
    RunFolder run(base, "r");
    run.create();
    for (int64_t s : {100, 200, 300}) fs::create_directories(run.checkpoint_dir(s));
    std::ofstream(run.checkpoint_dir(100) / RunFolder::kCompleteMarker).put('1');
    std::ofstream(run.checkpoint_dir(200) / RunFolder::kCompleteMarker).put('1');
    // 300 has no marker: a save that crashed half-way.
    EXPECT_EQ(run.complete_checkpoints(), (std::vector<int64_t>{100, 200}));
    EXPECT_EQ(run.newest_checkpoint(), 200);
}

TEST_F(RunFolderTest, PruneKeepsTheNewestFiles) {
    RunFolder run(base, "r");
    run.create();
    for (int64_t s : {10, 20, 30, 40}) {
        std::ofstream(run.step_lora(s)).put('x');
        fs::create_directories(run.checkpoint_dir(s));
        std::ofstream(run.checkpoint_dir(s) / RunFolder::kCompleteMarker).put('1');
    }
    std::ofstream(base / "r" / "r_12.safetensors").put('x');             // not a step file
    std::ofstream(base / "r" / "other_000000010.safetensors").put('x');  // another name
    run.prune(2);
    EXPECT_EQ(run.step_loras(), (std::vector<int64_t>{30, 40}));
    EXPECT_EQ(run.complete_checkpoints(), (std::vector<int64_t>{30, 40}));
    EXPECT_TRUE(fs::exists(base / "r" / "r_12.safetensors"));
    EXPECT_TRUE(fs::exists(base / "r" / "other_000000010.safetensors"));
    run.prune(0);
    EXPECT_TRUE(run.step_loras().empty());
    EXPECT_EQ(run.complete_checkpoints(), (std::vector<int64_t>{40}));  // the resume point stays
}

}  // namespace
}  // namespace loom
