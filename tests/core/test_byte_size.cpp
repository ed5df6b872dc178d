#include <gtest/gtest.h>

#include "loom/core/byte_size.h"
#include "loom/core/error.h"

namespace loom {
namespace {

TEST(ByteSize, ParsesUnits) {
    EXPECT_EQ(parse_byte_size("96MiB"), 96ull * 1024 * 1024);
    EXPECT_EQ(parse_byte_size("8GiB"), 8ull * 1024 * 1024 * 1024);
    EXPECT_EQ(parse_byte_size("1.5GB"), 1500000000ull);
    EXPECT_EQ(parse_byte_size("100000000"), 100000000ull);
    EXPECT_EQ(parse_byte_size("64 kib"), 65536ull);
    EXPECT_EQ(parse_byte_size("12B"), 12ull);
    EXPECT_EQ(parse_byte_size(" 2TB "), 2000000000000ull);
}

TEST(ByteSize, RejectsBadText) {
    const auto message = [](const char* text) {
        try {
            parse_byte_size(text);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    const std::string forms =
        " (write a number with an optional unit: 100000000, 96MiB, 8GiB, 1.5GB)";
    EXPECT_EQ(message("lots"), "invalid size 'lots': it does not start with a number" + forms);
    EXPECT_EQ(message("-5MiB"), "invalid size '-5MiB': it is negative" + forms);
    EXPECT_EQ(message("5 parsecs"), "invalid size '5 parsecs': unknown unit 'parsecs'" + forms);
    EXPECT_EQ(message("5 MiB extra"),
              "invalid size '5 MiB extra': unexpected text after the unit" + forms);
    EXPECT_EQ(message("99999999999999999999"),
              "invalid size '99999999999999999999': it is too large" + forms);
    EXPECT_EQ(message("20000000000TiB"), "invalid size '20000000000TiB': it is too large" + forms);
    EXPECT_EQ(message(""), "invalid size '': it does not start with a number" + forms);
}

TEST(ByteSize, FormatRoundTrips) {
    for (std::uint64_t v : {0ull, 1ull, 1023ull, 1024ull, 96ull << 20, 8ull << 30, 1500000000ull}) {
        EXPECT_EQ(parse_byte_size(format_byte_size(v)), v) << format_byte_size(v);
    }
    EXPECT_EQ(format_byte_size(96ull << 20), "96MiB");
    EXPECT_EQ(format_byte_size(100000000ull), "100000000");
}

TEST(ByteSize, HumanFormatLikeCuda) {
    EXPECT_EQ(format_bytes_human(16ull << 20), "16.00 MiB");
    EXPECT_EQ(format_bytes_human(7ull << 20), "7.00 MiB");
    EXPECT_EQ(format_bytes_human(1536), "1.50 KiB");
    EXPECT_EQ(format_bytes_human(12), "12 bytes");
}

}  // namespace
}  // namespace loom
