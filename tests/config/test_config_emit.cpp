// Emitting the resolved job and loading it again yields an identical job.

#include <gtest/gtest.h>

#include "job_text.h"
#include "loom/config/emit.h"

namespace loom::config {
namespace {

using testing::kMinimalJob;
using testing::load;

void expect_round_trip(const std::string& text) {
    const LoadedJob first = load(text);
    const std::string yaml = emit_job_yaml(first.job);
    const LoadedJob second = load(yaml);
    EXPECT_TRUE(first.job == second.job) << yaml;
    EXPECT_EQ(emit_job_yaml(second.job), yaml);
    EXPECT_TRUE(second.warnings.size() <= first.warnings.size());
}

TEST(ConfigEmit, MinimalJobRoundTrips) {
    expect_round_trip(kMinimalJob);
}

TEST(ConfigEmit, EveryKindOfValueRoundTrips) {
    expect_round_trip(std::string(kMinimalJob) +
                      "      trigger_word: \"true\"\n"
                      "      training_seed: 42\n"
                      "      network:\n        linear: 16\n        linear_alpha: 0.3\n"
                      "        network_kwargs:\n          ignore_if_contains: [ff, 'proj_in']\n"
                      "      train:\n        lr: 1.23456789012345e-5\n        noise_offset: 0.1\n"
                      "        optimizer_params:\n          betas: [0.9, 0.99]\n"
                      "      sample:\n        prompts: ['a \"quoted\" prompt', 'x: y']\n"
                      "        samples:\n          - prompt: one\n            seed: 7\n"
                      "      oom:\n        vram_limit: 96MiB\n"
                      "      perf:\n        fused_adamw: true\n        stream_prefetch: true\n"
                      "meta:\n  version: '1.0'\n  empty: ''\n  nested: {a: 1}\n");
}

TEST(ConfigEmit, ExampleValuesAreEmittedExactly) {
    const LoadedJob loaded = load(std::string(kMinimalJob) + "      train:\n        lr: 1e-4\n");
    const std::string yaml = emit_job_yaml(loaded.job);
    EXPECT_NE(yaml.find("lr: 1.0e-04\n"), std::string::npos) << yaml;
    EXPECT_NE(yaml.find("linear_alpha: 1.0\n"), std::string::npos) << yaml;
    EXPECT_NE(yaml.find("resolution: [512]\n"), std::string::npos) << yaml;
    EXPECT_NE(yaml.find("trigger_word: ~\n"), std::string::npos) << yaml;
}

TEST(ConfigEmit, DifferentJobsCompareUnequal) {
    const Job a = load(kMinimalJob).job;
    Job b = a;
    EXPECT_TRUE(a == b);
    b.config.process[0].datasets[0].resolution.push_back(768);
    EXPECT_FALSE(a == b);
    b = a;
    b.config.process[0].train.ema_config.ema_decay = 0.5;
    EXPECT_FALSE(a == b);
    for (bool PerfConfig::*key : {&PerfConfig::fused_adamw, &PerfConfig::channels_last,
                                  &PerfConfig::stream_prefetch, &PerfConfig::cuda_graphs}) {
        b = a;
        b.config.process[0].perf.*key = true;
        EXPECT_FALSE(a == b);
    }
}

TEST(ConfigEmit, PerfBlockIsEmittedWithEveryKey) {
    const std::string yaml = emit_job_yaml(load(kMinimalJob).job);
    EXPECT_NE(yaml.find("perf:\n"
                        "        fused_adamw: false\n"
                        "        channels_last: false\n"
                        "        stream_prefetch: false\n"
                        "        cuda_graphs: false\n"),
              std::string::npos)
        << yaml;
}

}  // namespace
}  // namespace loom::config
