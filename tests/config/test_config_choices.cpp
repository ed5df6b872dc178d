// The job's enumerations resolved once into values: every word the schema accepts maps to the
// value loom uses (synonyms and ai-toolkit values loom does not implement yet included), and a
// word outside the schema is an error naming the key.

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "job_text.h"
#include "loom/config/choices.h"
#include "loom/core/error.h"

namespace loom::config {
namespace {

using testing::kMinimalJob;
using testing::load;

// kMinimalJob with `--set` overrides, one per line.
Choices choices_of(const std::string& sets) {
    LoadOptions options;
    std::istringstream in(sets);
    std::string line;
    while (std::getline(in, line)) {
        if (!line.empty()) options.overrides.push_back(line);
    }
    return load(kMinimalJob, options).job.config.process.at(0).choices;
}

TEST(ConfigChoices, DefaultsMatchTheSchemaDefaults) {
    const Choices c = load(kMinimalJob).job.config.process.at(0).choices;
    EXPECT_EQ(c.precision, Precision::kFloat32);
    EXPECT_EQ(c.save_dtype, SaveDtype::kFloat16);
    EXPECT_EQ(c.loss, LossType::kMse);
    EXPECT_EQ(c.timestep_bias, TimestepBias::kBalanced);
    EXPECT_EQ(c.lr_scheduler, LrScheduler::kConstant);
    EXPECT_EQ(c.sampler, PreviewSampler::kDdpm);
    EXPECT_EQ(c.lora_layout, LoRAKeyLayout::kKohya);
    EXPECT_EQ(c.reuse_stable, ReuseStable::kAuto);
}

TEST(ConfigChoices, TheJobsWordsBecomeValues) {
    const Choices c = choices_of(
        "config.process.0.train.dtype=bfloat16\n"
        "config.process.0.save.dtype=bf16\n"
        "config.process.0.train.loss_type=mae\n"
        "config.process.0.train.content_or_style=style\n"
        "config.process.0.train.lr_scheduler=constant_with_warmup\n"
        "config.process.0.sample.sampler=euler\n"
        "config.process.0.save.format=peft\n"
        "config.process.0.oom.reuse_stable=off\n");
    EXPECT_EQ(c.precision, Precision::kBFloat16);
    EXPECT_EQ(c.save_dtype, SaveDtype::kBFloat16);
    EXPECT_EQ(c.loss, LossType::kMae);
    EXPECT_EQ(c.timestep_bias, TimestepBias::kStyle);
    EXPECT_EQ(c.lr_scheduler, LrScheduler::kConstantWithWarmup);
    EXPECT_EQ(c.sampler, PreviewSampler::kEuler);
    EXPECT_EQ(c.lora_layout, LoRAKeyLayout::kPeft);
    EXPECT_EQ(c.reuse_stable, ReuseStable::kOff);
}

TEST(ConfigChoices, ValuesLoomDoesNotImplementYetResolveToWhatLoomUses) {
    // The reader warns "not supported yet ... loom uses X instead"; X is what they resolve to.
    const Choices c = choices_of(
        "config.process.0.train.dtype=fp16\n"
        "config.process.0.train.loss_type=pseudo_huber\n"
        "config.process.0.train.lr_scheduler=cosine_with_restarts\n"
        "config.process.0.sample.sampler=flowmatch\n");
    EXPECT_EQ(c.precision, Precision::kFloat32);
    EXPECT_EQ(c.loss, LossType::kMse);
    EXPECT_EQ(c.lr_scheduler, LrScheduler::kConstant);
    EXPECT_EQ(c.sampler, PreviewSampler::kDdim);
}

TEST(ConfigChoices, EverySynonymResolves) {
    for (const char* w : {"fp32", "float", "float32", "single"}) {
        EXPECT_EQ(precision_of(w), Precision::kFloat32) << w;
    }
    for (const char* w : {"float16", "fp16", "half"}) {
        EXPECT_EQ(save_dtype_of(w), SaveDtype::kFloat16) << w;
    }
    for (const char* w : {"float32", "fp32", "float", "single"}) {
        EXPECT_EQ(save_dtype_of(w), SaveDtype::kFloat32) << w;
    }
    EXPECT_STREQ(to_string(LrScheduler::kConstantWithWarmup), "constant_with_warmup");
    EXPECT_STREQ(to_string(PreviewSampler::kEuler), "euler");
}

TEST(ConfigChoices, AWordOutsideTheSchemaNamesTheKey) {
    try {
        loss_type_of("huber", "config.process.0.train.loss_type");
        FAIL() << "no error";
    } catch (const ConfigError& e) {
        EXPECT_EQ(e.key_path(), "config.process.0.train.loss_type");
        EXPECT_NE(std::string(e.what()).find("'huber' is not one of: mse, mae"), std::string::npos)
            << e.what();
    }
    EXPECT_THROW(preview_sampler_of("--sampler", "--sampler"), ConfigError);
    EXPECT_THROW(reuse_stable_of("sometimes"), ConfigError);
}

}  // namespace
}  // namespace loom::config
