// Caption processing: trigger words, token normalisation, dropout and shuffling with a seed.

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "loom/config/job.h"
#include "loom/data/caption.h"
#include "loom/data/rng.h"

namespace loom::data {
namespace {

const std::optional<std::string> kTrigger = std::string("p3r5on");

TEST(Trigger, PlaceholdersAreReplaced) {
    EXPECT_EQ(inject_trigger("[trigger] in a red hat", kTrigger), "p3r5on in a red hat");
    EXPECT_EQ(inject_trigger("photo of [name], smiling", kTrigger), "photo of p3r5on, smiling");
    EXPECT_EQ(inject_trigger("[trigger] and [trigger]", kTrigger), "p3r5on and p3r5on");
}

TEST(Trigger, PrependedWhenAbsentButNotTwice) {
    EXPECT_EQ(inject_trigger("a man on a bench", kTrigger), "p3r5on a man on a bench");
    EXPECT_EQ(inject_trigger("a photo of p3r5on", kTrigger), "a photo of p3r5on");
    // ai-toolkit counts substrings, case-sensitively
    EXPECT_EQ(inject_trigger("xp3r5onx", kTrigger), "xp3r5onx");
    EXPECT_EQ(inject_trigger("P3R5ON smiling", kTrigger), "p3r5on P3R5ON smiling");
    EXPECT_EQ(inject_trigger("", kTrigger), "p3r5on");
}

TEST(Trigger, WithoutATriggerPlaceholdersAreRemoved) {
    EXPECT_EQ(inject_trigger("[trigger] in a hat", std::nullopt), " in a hat");
    EXPECT_EQ(inject_trigger("a hat", std::nullopt), "a hat");
    EXPECT_EQ(inject_trigger("a hat", std::string("  ")), "a hat");  // blank: not prepended
}

TEST(Tokens, NormalisedLikeAiToolkit) {
    EXPECT_EQ(normalize_tokens("a,  b ,,c\n"), "a, b, c");
    EXPECT_EQ(normalize_tokens("one sentence. two sentences."), "one sentence. two sentences.");
    EXPECT_EQ(normalize_tokens(" , ,"), "");
    EXPECT_EQ(normalize_tokens(""), "");
}

TEST(ProcessCaption, TriggerAfterNormalisation) {
    Rng rng(1);
    CaptionOptions o;
    o.trigger_word = "p3r5on";
    EXPECT_EQ(process_caption("[trigger],wearing a hat ,  outdoors", o, rng),
              "p3r5on, wearing a hat, outdoors");
    EXPECT_EQ(process_caption("wearing a hat", o, rng), "p3r5on wearing a hat");
}

TEST(ProcessCaption, NoRandomnessDrawnWhenAugmentationIsOff) {
    Rng used(7), fresh(7);
    CaptionOptions o;
    o.trigger_word = "tw";
    process_caption("a, b, c", o, used);
    EXPECT_EQ(used(), fresh());
}

TEST(ProcessCaption, DropoutDropsTheWholeCaptionIncludingTheTrigger) {
    CaptionOptions o;
    o.trigger_word = "p3r5on";
    o.caption_dropout_rate = 1.0;
    Rng rng(3);
    EXPECT_EQ(process_caption("a dog, running", o, rng), "");
}

std::vector<std::string> dropout_run(std::uint64_t seed) {
    CaptionOptions o;
    o.caption_dropout_rate = 0.25;
    std::vector<std::string> out;
    for (std::uint64_t i = 0; i < 2000; ++i) {
        Rng rng(mix_seed(seed, i));
        out.push_back(process_caption("a cat", o, rng));
    }
    return out;
}

TEST(ProcessCaption, DropoutIsSeededAndHasTheConfiguredRate) {
    const std::vector<std::string> a = dropout_run(42), b = dropout_run(42), c = dropout_run(43);
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
    const auto dropped = std::count(a.begin(), a.end(), "");
    EXPECT_GT(dropped, 2000 * 0.25 - 80);  // ~4.5 standard deviations
    EXPECT_LT(dropped, 2000 * 0.25 + 80);
}

TEST(ProcessCaption, ShuffleKeepsTheFirstKeepTokensAndIsSeeded) {
    CaptionOptions o;
    o.shuffle_tokens = true;
    o.keep_tokens = 2;
    const std::string raw = "p3r5on, portrait, red hat, smiling, park, sunset, bokeh";
    std::set<std::string> orders;
    for (std::uint64_t seed = 0; seed < 30; ++seed) {
        Rng a(seed), b(seed);
        const std::string out = process_caption(raw, o, a);
        EXPECT_EQ(out, process_caption(raw, o, b));
        EXPECT_EQ(out.rfind("p3r5on, portrait, ", 0), 0u) << out;
        std::vector<std::string> got, want = {"red hat", "smiling", "park", "sunset", "bokeh"};
        std::string rest = out.substr(std::string("p3r5on, portrait, ").size());
        for (std::size_t p; (p = rest.find(", ")) != std::string::npos; rest.erase(0, p + 2))
            got.push_back(rest.substr(0, p));
        got.push_back(rest);
        std::sort(got.begin(), got.end());
        std::sort(want.begin(), want.end());
        EXPECT_EQ(got, want) << out;
        orders.insert(out);
    }
    EXPECT_GT(orders.size(), 20u);
    // The draw sequence is fixed by mt19937_64 and loom's own Fisher-Yates, not by the
    // standard library: this value must never change between builds or platforms (checked
    // against an independent Python implementation of mt19937_64 and the same shuffle).
    Rng golden(12345);
    EXPECT_EQ(process_caption("a, b, c, d, e, f, g, h", CaptionOptions{std::nullopt, 0.0, true, 1},
                              golden),
              "a, f, c, h, d, b, g, e");
}

TEST(ProcessCaption, TriggerIsAddedBeforeShufflingSoKeepTokensCanHoldIt) {
    CaptionOptions o;
    o.trigger_word = "tw";
    o.shuffle_tokens = true;
    o.keep_tokens = 1;
    for (std::uint64_t seed = 0; seed < 10; ++seed) {
        Rng rng(seed);
        const std::string out = process_caption("tw, a, b, c", o, rng);
        EXPECT_EQ(out.rfind("tw, ", 0), 0u) << out;
    }
}

TEST(CaptionOptions, FromTheDatasetConfig) {
    config::DatasetConfig c;
    c.trigger_word = "sks";
    c.caption_dropout_rate = 0.05;
    c.shuffle_tokens = true;
    c.keep_tokens = 3;
    const CaptionOptions o = CaptionOptions::from(c);
    EXPECT_EQ(o.trigger_word, std::optional<std::string>("sks"));
    EXPECT_DOUBLE_EQ(o.caption_dropout_rate, 0.05);
    EXPECT_TRUE(o.shuffle_tokens);
    EXPECT_EQ(o.keep_tokens, 3);
}

TEST(Rng, HelpersAreDeterministicAndInRange) {
    Rng a(5), b(5);
    for (int i = 0; i < 100; ++i) {
        const double u = uniform01(a);
        EXPECT_GE(u, 0.0);
        EXPECT_LT(u, 1.0);
        EXPECT_EQ(u, uniform01(b));
        EXPECT_LT(uniform_below(a, 7), 7u);
        uniform_below(b, 7);
    }
    EXPECT_NE(mix_seed(1, 2), mix_seed(2, 1));
    EXPECT_NE(mix_seed(1, 2, 3), mix_seed(1, 2, 4));
    std::vector<int> v = {0, 1, 2, 3, 4, 5};
    shuffle(v, a, 6);  // nothing to shuffle
    EXPECT_EQ(v, (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

}  // namespace
}  // namespace loom::data
