// Animated WebP previews (data/animation.h): what is written reads back frame for frame
// (lossless), and bad input is a clear error.

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "loom/core/error.h"
#include "loom/data/animation.h"
#include "temp_dir.h"

namespace loom::data {
namespace {

std::vector<Image> gradient_frames(int count, int width, int height) {
    std::vector<Image> frames;
    for (int f = 0; f < count; ++f) {
        Image img(width, height);
        for (int y = 0; y < height; ++y) {
            for (int x = 0; x < width; ++x) {
                std::uint8_t* p = img.at(x, y);
                p[0] = static_cast<std::uint8_t>(x * 30 + f * 50);
                p[1] = static_cast<std::uint8_t>(y * 40);
                p[2] = static_cast<std::uint8_t>(255 - f * 60);
            }
        }
        frames.push_back(std::move(img));
    }
    return frames;
}

TEST(AnimatedWebP, FramesReadBackExactly) {
    if (!animated_webp_supported()) GTEST_SKIP() << "built without libwebpmux/libwebpdemux";
    const std::vector<Image> frames = gradient_frames(4, 8, 6);
    test::TempDir dir;
    write_animated_webp(dir / "clip.webp", frames, 16);
    std::ifstream in(dir / "clip.webp", std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    EXPECT_EQ(bytes.str().substr(0, 4), "RIFF");
    EXPECT_NE(bytes.str().find("ANIM"), std::string::npos);  // an animation, not a still
    const std::vector<Image> back = decode_animated_webp(bytes.str(), "clip.webp");
    ASSERT_EQ(back.size(), frames.size());
    for (std::size_t f = 0; f < frames.size(); ++f) {
        EXPECT_EQ(back[f].width, 8);
        EXPECT_EQ(back[f].height, 6);
        EXPECT_EQ(back[f].pixels, frames[f].pixels) << "frame " << f;
    }
}

TEST(AnimatedWebP, BadInputIsAClearError) {
    if (!animated_webp_supported()) GTEST_SKIP() << "built without libwebpmux/libwebpdemux";
    EXPECT_THROW(encode_animated_webp({}, 16), Error);
    EXPECT_THROW(encode_animated_webp(gradient_frames(2, 8, 6), 0), Error);
    std::vector<Image> mixed = gradient_frames(2, 8, 6);
    mixed.push_back(Image(6, 8));
    try {
        encode_animated_webp(mixed, 16);
        FAIL() << "frames of two sizes were encoded";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("share one size (8x6)"), std::string::npos);
    }
    try {
        decode_animated_webp("RIFF\x04\x00\x00\x00WEBPjunk", "broken.webp");
        FAIL() << "garbage decoded";
    } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("broken.webp"), std::string::npos);
    }
}

}  // namespace
}  // namespace loom::data
