#include <gtest/gtest.h>

#include "loom/core/format.h"
#include "loom/core/utf8.h"

namespace loom {
namespace {

TEST(Utf8, ValidTextHasNoError) {
    EXPECT_FALSE(find_invalid_utf8("plain ascii\nline two").has_value());
    EXPECT_FALSE(find_invalid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80").has_value());
}

TEST(Utf8, ReportsLineColumnAndOffset) {
    const auto bad = find_invalid_utf8("ok\ncaf\xC3\xA9 \xFF");
    ASSERT_TRUE(bad.has_value());
    EXPECT_EQ(bad->line, 2u);
    EXPECT_EQ(bad->column, 6u);  // c a f é space, then the bad byte
    EXPECT_EQ(bad->offset, 9u);
}

TEST(Utf8, RejectsOverlongSurrogatesAndTruncation) {
    EXPECT_TRUE(find_invalid_utf8("\xC0\xAF").has_value());          // overlong '/'
    EXPECT_TRUE(find_invalid_utf8("\xED\xA0\x80").has_value());      // UTF-16 surrogate
    EXPECT_TRUE(find_invalid_utf8("\xF4\x90\x80\x80").has_value());  // above U+10FFFF
    EXPECT_TRUE(find_invalid_utf8("abc\xE2\x82").has_value());       // truncated
}

TEST(Format, Placeholders) {
    EXPECT_EQ(format("step {}/{} loss {:.4f}", 3, 10, 0.123456), "step 3/10 loss 0.1235");
    EXPECT_EQ(format("{:>5}|{:<4}|", 42, "ab"), "   42|ab  |");
    EXPECT_EQ(format("{{literal}} {}", "x"), "{literal} x");
    EXPECT_EQ(format("{} {}", 1), "1 {?}");
    EXPECT_EQ(format("{:.2e}", 12345.0), "1.23e+04");
}

}  // namespace
}  // namespace loom
