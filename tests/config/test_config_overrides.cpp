// --set PATH=VALUE overrides.

#include <gtest/gtest.h>

#include "job_text.h"

namespace loom::config {
namespace {

using testing::error_of;
using testing::kMinimalJob;
using testing::load;

LoadOptions sets(std::vector<std::string> overrides) {
    LoadOptions options;
    options.overrides = std::move(overrides);
    return options;
}

TEST(ConfigOverrides, SetsAnExistingKeyAndLogsIt) {
    const LoadedJob loaded = load(kMinimalJob, sets({"config.process.0.device=cpu"}));
    EXPECT_EQ(loaded.job.config.process[0].device, "cpu");
    ASSERT_EQ(loaded.applied_overrides.size(), 1u);
    EXPECT_EQ(loaded.applied_overrides[0], "config.process.0.device: sim -> cpu");
}

TEST(ConfigOverrides, CreatesMissingSections) {
    const LoadedJob loaded = load(kMinimalJob, sets({"config.process.0.train.lr=1e-4"}));
    EXPECT_DOUBLE_EQ(loaded.job.config.process[0].train.lr, 1e-4);
    EXPECT_EQ(loaded.applied_overrides[0], "config.process.0.train.lr: (unset) -> 1e-4");
}

TEST(ConfigOverrides, SetsAPerfSwitch) {
    const LoadedJob loaded = load(kMinimalJob, sets({"config.process.0.perf.fused_adamw=true"}));
    EXPECT_TRUE(loaded.job.config.process[0].perf.fused_adamw);
    EXPECT_FALSE(loaded.job.config.process[0].perf.channels_last);
    EXPECT_EQ(loaded.applied_overrides[0], "config.process.0.perf.fused_adamw: (unset) -> true");
    EXPECT_EQ(error_of(kMinimalJob, sets({"config.process.0.perf.channels_last=sometimes"})),
              "--set config.process.0.perf.channels_last=sometimes: "
              "config.process.0.perf.channels_last must be true or false, got 'sometimes'");
}

TEST(ConfigOverrides, ListValuesKeepTheirCommas) {
    const LoadedJob loaded =
        load(kMinimalJob, sets({"config.process.0.datasets.0.resolution=[512, 768]"}));
    EXPECT_EQ(loaded.job.config.process[0].datasets[0].resolution, (std::vector<int>{512, 768}));
}

TEST(ConfigOverrides, AppliedInOrderAfterSubstitution) {
    std::string text = kMinimalJob;
    text += "meta:\n  title: \"[name]\"\n";
    const LoadedJob loaded =
        load(text, sets({"config.name=other", "meta.title='[name] kept'", "config.name=final"}));
    EXPECT_EQ(loaded.job.config.name, "final");
    EXPECT_EQ(loaded.job.meta.at(0).second, "[name] kept");  // not substituted again
}

TEST(ConfigOverrides, InvalidValueNamesTheOverride) {
    EXPECT_EQ(error_of(kMinimalJob, sets({"config.process.0.train.batch_size=0"})),
              "--set config.process.0.train.batch_size=0: config.process.0.train.batch_size must "
              "be >= 1, got 0");
}

TEST(ConfigOverrides, MissingEqualsSign) {
    EXPECT_EQ(error_of(kMinimalJob, sets({"config.name"})),
              "--set config.name: expected PATH=VALUE, e.g. --set "
              "config.process.0.train.lr=1e-4");
}

TEST(ConfigOverrides, IndexOutOfRange) {
    EXPECT_EQ(error_of(kMinimalJob, sets({"config.process.3.train.lr=1"})),
              "--set config.process.3.train.lr=1: config.process.3: 3 is not an index of this "
              "list (it has 1 items, numbered from 0)");
}

TEST(ConfigOverrides, EmptyPathPart) {
    EXPECT_EQ(error_of(kMinimalJob, sets({"config..name=x"})),
              "--set config..name=x: the path 'config..name' has an empty part; write keys "
              "separated by single dots");
}

TEST(ConfigOverrides, CannotEnterAScalar) {
    EXPECT_EQ(error_of(kMinimalJob, sets({"job.kind=x"})),
              "--set job.kind=x: job.kind cannot be set: its parent holds 'extension', not a "
              "mapping or a list");
}

TEST(ConfigOverrides, UnknownKeyFromOverrideIsWarnedAtTheOverride) {
    const LoadedJob loaded = load(kMinimalJob, sets({"config.process.0.trian.lr=1"}));
    ASSERT_EQ(loaded.warnings.size(), 1u);
    EXPECT_EQ(loaded.warnings[0].where, "--set config.process.0.trian.lr=1");
}

}  // namespace
}  // namespace loom::config
