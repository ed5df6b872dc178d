// The typed text conditioning as caches hold it: one prompt's context and pooled embedding by
// name, any token count, and back with a batch dimension.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "loom/core/error.h"
#include "loom/model/text/text_conditioning.h"

namespace loom {
namespace {

TEST(TextConditioning, OnePromptRoundTripsThroughNamedTensors) {
    TextConditioning batch;
    batch.context = torch::randn({2, 5, 8});  // 5 tokens: not CLIP's 77
    batch.text_embeds = torch::randn({2, 3});
    const NamedTensors named = batch.to_named(1);
    ASSERT_EQ(named.size(), 2u);
    EXPECT_EQ(named[0].first, "context");
    EXPECT_EQ(named[0].second.sizes(), at::IntArrayRef({5, 8}));
    EXPECT_EQ(named[1].first, "text_embeds");
    const TextConditioning back = TextConditioning::from_named(named, "cache");
    EXPECT_EQ(back.context.sizes(), at::IntArrayRef({1, 5, 8}));
    EXPECT_TRUE(torch::equal(back.context[0], batch.context[1]));
    EXPECT_TRUE(torch::equal(back.text_embeds[0], batch.text_embeds[1]));
    // SD 1.x: no pooled embedding, none invented.
    TextConditioning sd1;
    sd1.context = torch::randn({1, 77, 4});
    const NamedTensors only_context = sd1.to_named();
    EXPECT_EQ(only_context.size(), 1u);
    EXPECT_FALSE(TextConditioning::from_named(only_context, "cache").text_embeds.defined());
}

TEST(TextConditioning, ASetWithoutContextIsAFormatErrorNamingItsSource) {
    try {
        TextConditioning::from_named({{"text_embeds", torch::zeros({3})}}, "cache/abc.safetensors");
        FAIL() << "no error";
    } catch (const FormatError& e) {
        EXPECT_EQ(e.path(), "cache/abc.safetensors");
        EXPECT_NE(std::string(e.what()).find("no 'context' tensor"), std::string::npos);
    }
}

}  // namespace
}  // namespace loom
