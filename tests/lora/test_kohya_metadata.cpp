// kohya's ss_* metadata names what trained the LoRA: the optimizer ai-toolkit would have built
// for the same train.optimizer, the network module and base model version of the family.

#include <gtest/gtest.h>

#include <string>

#include "loom/config/load.h"
#include "loom/lora/kohya_metadata.h"

namespace loom {
namespace {

std::string value_of(const SafetensorsMetadata& metadata, const std::string& key) {
    for (const auto& [k, v] : metadata) {
        if (k == key) return v;
    }
    return "";
}

SafetensorsMetadata metadata_for(const std::string& optimizer) {
    const std::string text =
        "job: extension\n"
        "config:\n"
        "  name: test\n"
        "  process:\n"
        "    - type: sd_trainer\n"
        "      training_folder: out\n"
        "      device: sim\n"
        "      datasets:\n"
        "        - folder_path: data\n"
        "      model:\n"
        "        name_or_path: models/tiny\n"
        "      train:\n"
        "        optimizer: " +
        optimizer + "\n";
    config::LoadOptions options;
    options.env = [](const std::string&) { return std::optional<std::string>(); };
    const config::LoadedJob loaded = config::load_job_text(text, "job.yaml", options);
    KohyaTrainingFacts facts;
    facts.step = 10;
    facts.arch = config::Arch::kSd1;
    return kohya_metadata(loaded.job, loaded.job.config.process.at(0), facts);
}

TEST(KohyaMetadata, NamesTheOptimizerTheJobTrainedWith) {
    EXPECT_EQ(value_of(metadata_for("adamw"), "ss_optimizer"), "AdamW");
    EXPECT_EQ(value_of(metadata_for("adamw8bit"), "ss_optimizer"),
              "bitsandbytes.optim.adamw.AdamW8bit");
    EXPECT_EQ(value_of(metadata_for("prodigy"), "ss_optimizer"), "prodigyopt.prodigy.Prodigy");
    EXPECT_EQ(value_of(metadata_for("prodigyopt"), "ss_optimizer"), "prodigyopt.prodigy.Prodigy");
}

}  // namespace
}  // namespace loom
