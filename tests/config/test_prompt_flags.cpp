// ai-toolkit's flags inside a preview prompt ("make the person smile --ctrl_img p1.jpg --w 768"),
// split as GenerateImageConfig._process_prompt_string does (issue 40).

#include <gtest/gtest.h>

#include "loom/config/prompt_flags.h"
#include "loom/core/error.h"

namespace loom::config {
namespace {

TEST(PromptFlags, TheExamplesControlImageAndSizeFlags) {
    const PromptFlags f = parse_prompt_flags(
        "make the person smile  --ctrl_img /path/to/control/folder/person 1.jpg --w 768 --h 512");
    EXPECT_EQ(f.prompt, "make the person smile");
    ASSERT_TRUE(f.ctrl_img);
    EXPECT_EQ(*f.ctrl_img, "/path/to/control/folder/person 1.jpg");  // the value is the rest
    EXPECT_EQ(f.width, 768);
    EXPECT_EQ(f.height, 512);
    EXPECT_FALSE(f.seed);
    EXPECT_TRUE(f.unused.empty());
}

TEST(PromptFlags, EveryFlagLoomAppliesAndTheOnesItNames) {
    const PromptFlags f = parse_prompt_flags(
        "a dog --n blurry, low quality --d 42 --l 4.5 --s 12 --frames 9 --fps 16 --m 1.2 --gr 0.7");
    EXPECT_EQ(f.prompt, "a dog");
    EXPECT_EQ(f.neg, "blurry, low quality");
    EXPECT_EQ(f.seed, 42);
    EXPECT_DOUBLE_EQ(*f.guidance_scale, 4.5);
    EXPECT_EQ(f.steps, 12);
    EXPECT_EQ(f.frames, 9);
    EXPECT_EQ(f.fps, 16);
    EXPECT_EQ(f.unused, (std::vector<std::string>{"--m", "--gr"}));
    // The long spellings.
    const PromptFlags g = parse_prompt_flags("x --seed 7 --cfg 2 --steps 3 --num_frames 5");
    EXPECT_EQ(g.seed, 7);
    EXPECT_DOUBLE_EQ(*g.guidance_scale, 2.0);
    EXPECT_EQ(g.steps, 3);
    EXPECT_EQ(g.frames, 5);
}

TEST(PromptFlags, APlainPromptIsItselfTrimmed) {
    const PromptFlags f =
        parse_prompt_flags("  [trigger] holding a sign that says 'I LOVE PROMPTS!' ");
    EXPECT_EQ(f.prompt, "[trigger] holding a sign that says 'I LOVE PROMPTS!'");
    EXPECT_FALSE(f.ctrl_img || f.width || f.neg);
}

TEST(PromptFlags, ABadNumberNamesThePromptAndTheFlag) {
    try {
        parse_prompt_flags("a cat --w big");
        FAIL() << "no error";
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("'a cat --w big'"), std::string::npos) << m;
        EXPECT_NE(m.find("--w takes a whole number, not 'big'"), std::string::npos) << m;
    }
    EXPECT_THROW(parse_prompt_flags("a cat --s 2.5"), Error);
    EXPECT_THROW(parse_prompt_flags("a cat --l"), Error);
}

}  // namespace
}  // namespace loom::config
