#include <gtest/gtest.h>

#include <set>

#include "loom/core/error.h"
#include "loom/io/safetensors.h"
#include "malformed_cases.h"

namespace loom {
namespace {

class Malformed : public ::testing::TestWithParam<test::MalformedCase> {};

TEST_P(Malformed, ThrowsFormatErrorNamingFileAndProblem) {
    const test::MalformedCase& c = GetParam();
    try {
        SafetensorsFile::parse(c.bytes, "model.safetensors");
        FAIL() << "parsed without error";
    } catch (const FormatError& e) {
        EXPECT_EQ(e.path(), "model.safetensors");
        EXPECT_EQ(std::string(e.what()), "model.safetensors: " + c.message);
    }
}

INSTANTIATE_TEST_SUITE_P(Safetensors, Malformed, ::testing::ValuesIn(test::malformed_cases()),
                         [](const ::testing::TestParamInfo<test::MalformedCase>& info) {
                             return info.param.name;
                         });

TEST(MalformedCases, NamesAreUniqueAndThereAreEnough) {
    std::set<std::string> names;
    for (const test::MalformedCase& c : test::malformed_cases()) {
        EXPECT_TRUE(names.insert(c.name).second) << c.name;
    }
    EXPECT_GE(names.size(), 25u);
}

}  // namespace
}  // namespace loom
