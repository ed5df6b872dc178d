// The T5 tokenizer's pipeline on a hand-made tokenizer.json (every expected id worked out by
// hand), its errors on bad files, and the T5 encoder's config, weights and position buckets.
// Parity with transformers on real-shaped files is test_t5_parity.cpp.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/model/loading/diffusers_folder.h"
#include "loom/model/loading/tensor_file.h"
#include "loom/model/text/t5_encoder.h"
#include "loom/model/tokenizers/t5_tokenizer.h"
#include "temp_dir.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using Ids = std::vector<std::int64_t>;

// ids: <pad> 0, </s> 1, <unk> 2, ▁ 3, ▁a 4, b 5, ▁ab 6, c 7, ▁c 8, <extra_id_0> 9
Json tiny_tokenizer() {
    return Json{
        {"version", "1.0"},
        {"normalizer", nullptr},
        {"added_tokens",
         Json::array(
             {{{"id", 0}, {"content", "<pad>"}, {"special", true}, {"normalized", false}},
              {{"id", 1}, {"content", "</s>"}, {"special", true}, {"normalized", false}},
              {{"id", 2}, {"content", "<unk>"}, {"special", true}, {"normalized", false}},
              {{"id", 9}, {"content", "<extra_id_0>"}, {"special", true}, {"normalized", false}}})},
        {"model",
         {{"type", "Unigram"},
          {"unk_id", 2},
          {"vocab",
           Json::array({Json::array({"<pad>", 0.0}), Json::array({"</s>", 0.0}),
                        Json::array({"<unk>", 0.0}), Json::array({"\u2581", -2.0}),
                        Json::array({"\u2581a", -1.0}), Json::array({"b", -3.0}),
                        Json::array({"\u2581ab", -2.5}), Json::array({"c", -4.0}),
                        Json::array({"\u2581c", -9.0}), Json::array({"<extra_id_0>", 0.0})})}}}};
}

class T5TokenizerTest : public ::testing::Test {
  protected:
    fs::path write(const Json& j, const std::string& name = "tokenizer.json") {
        std::ofstream(dir / name) << j.dump();
        return dir / name;
    }
    T5Tokenizer load(const Json& j) { return T5Tokenizer::from_file(write(j)); }
    test::TempDir dir;
};

TEST_F(T5TokenizerTest, ViterbiTakesTheBestScoringSegmentation) {
    const T5Tokenizer tok = load(tiny_tokenizer());
    EXPECT_EQ(tok.tokenize("ab"), (Ids{6}));      // ▁ab (-2.5) beats ▁a + b (-4)
    EXPECT_EQ(tok.tokenize("abb"), (Ids{6, 5}));  // ▁ab b
    EXPECT_EQ(tok.tokenize("c"), (Ids{3, 7}));    // ▁ + c (-6) beats ▁c (-9)
    EXPECT_EQ(tok.tokenize("a"), (Ids{4}));
}

TEST_F(T5TokenizerTest, UnknownRunsFuseIntoOneUnk) {
    const T5Tokenizer tok = load(tiny_tokenizer());
    EXPECT_EQ(tok.tokenize("xyz"), (Ids{3, 2}));          // ▁ then one <unk> for "xyz"
    EXPECT_EQ(tok.tokenize("axyzb"), (Ids{4, 2, 5}));     // ▁a <unk> b
    EXPECT_EQ(tok.tokenize("x\u00e9b"), (Ids{3, 2, 5}));  // multi-byte unknowns fuse too
}

TEST_F(T5TokenizerTest, WhitespaceSplitsWordsAndEachGetsAMetaspace) {
    const T5Tokenizer tok = load(tiny_tokenizer());
    EXPECT_EQ(tok.tokenize("a \t\n b"), (Ids{4, 3, 5}));  // ▁a ▁ b
    EXPECT_EQ(tok.tokenize("  a  "), (Ids{4}));           // spaces around are dropped
    EXPECT_EQ(tok.tokenize("a\u3000b"), (Ids{4, 3, 5}));  // U+3000 is white space
    EXPECT_EQ(tok.tokenize(""), Ids{});
    // A "▁" typed in the text starts a piece of its own, and no second one is prepended.
    EXPECT_EQ(tok.tokenize("\u2581a\u2581\u2581b"), (Ids{4, 3, 3, 5}));
}

TEST_F(T5TokenizerTest, AddedTokensAreSplitOutOfTheRawText) {
    const T5Tokenizer tok = load(tiny_tokenizer());
    EXPECT_EQ(tok.tokenize("a</s>b"), (Ids{4, 1, 3, 5}));
    EXPECT_EQ(tok.tokenize("<extra_id_0>ab<pad>"), (Ids{9, 6, 0}));
    EXPECT_EQ(tok.tokenize("<EXTRA_ID_0>"), (Ids{3, 2}));  // case matters: all unknown
}

TEST_F(T5TokenizerTest, EncodeAppendsEosTruncatesAndPads) {
    const T5Tokenizer tok = load(tiny_tokenizer());
    EXPECT_EQ(tok.encode("ab", 4), (Ids{6, 1, 0, 0}));
    EXPECT_EQ(tok.encode("a a a a", 3), (Ids{4, 4, 1}));  // the last id stays </s>
    EXPECT_EQ(tok.encode("", 2), (Ids{1, 0}));
    EXPECT_EQ(tok.pad_id(), 0);
    EXPECT_EQ(tok.eos_id(), 1);
    EXPECT_EQ(tok.vocab_size(), 10u);
    EXPECT_THROW(tok.encode("a", 0), Error);
}

TEST_F(T5TokenizerTest, InvalidUtf8IsAnErrorNamingWhere) {
    const T5Tokenizer tok = load(tiny_tokenizer());
    try {
        tok.tokenize("ok\n\xff");
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
    }
}

void expect_format_error(const std::function<void()>& f, const std::string& needle) {
    try {
        f();
        FAIL() << "no FormatError";
    } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
}

TEST_F(T5TokenizerTest, BadFilesNameTheKey) {
    Json j = tiny_tokenizer();
    j["model"]["type"] = "BPE";
    expect_format_error([&] { load(j); }, "model.type");
    j = tiny_tokenizer();
    j["model"]["vocab"][4] = "\u2581a";
    expect_format_error([&] { load(j); }, "model.vocab.4");
    j = tiny_tokenizer();
    j["model"]["unk_id"] = 99;
    expect_format_error([&] { load(j); }, "model.unk_id");
    j = tiny_tokenizer();
    j["added_tokens"][3]["lstrip"] = true;
    expect_format_error([&] { load(j); }, "added_tokens.3");
    j = tiny_tokenizer();
    j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "!!not base64"}};
    expect_format_error([&] { load(j); }, "precompiled_charsmap");
    j = tiny_tokenizer();
    j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "AAAAAA=="}};
    expect_format_error([&] { load(j); }, "trie size");
    j = tiny_tokenizer();
    j["model"]["vocab"].erase(1);
    j["added_tokens"].erase(1);
    expect_format_error([&] { load(j); }, "</s>");
    std::ofstream(dir / "broken.json") << "{\"model\": ";
    expect_format_error([&] { T5Tokenizer::from_file(dir / "broken.json"); }, "not valid JSON");
}

TEST_F(T5TokenizerTest, AFolderWithOnlySpieceModelSaysHowToConvertIt) {
    std::ofstream(dir / "spiece.model") << "x";
    try {
        T5Tokenizer::from_folder(dir.path());
        FAIL() << "no error";
    } catch (const IoError& e) {
        EXPECT_NE(std::string(e.what()).find("save_pretrained"), std::string::npos) << e.what();
    }
    EXPECT_THROW(T5Tokenizer::from_folder(dir / "missing"), IoError);
}

TEST(T5Encoder, RelativePositionBucketsMatchTheReferenceFormula) {
    // Hand-computed for 32 buckets, max distance 128: keys before the query use buckets 0..15,
    // after it 16..31; distances below 8 are exact, then log-spaced up to 15.
    const at::Tensor b = t5_relative_position_buckets(1, 300, 32, 128, at::kCPU);
    const at::Tensor a = t5_relative_position_buckets(300, 1, 32, 128, at::kCPU);
    EXPECT_EQ(b[0][0].item<int64_t>(), 0);
    EXPECT_EQ(b[0][1].item<int64_t>(), 17);  // one key after
    EXPECT_EQ(a[1][0].item<int64_t>(), 1);   // one key before
    EXPECT_EQ(a[7][0].item<int64_t>(), 7);
    EXPECT_EQ(a[8][0].item<int64_t>(), 8);     // 8 + floor(log(1) / log(16) * 8)
    EXPECT_EQ(a[20][0].item<int64_t>(), 10);   // 8 + floor(log(2.5) / log(16) * 8) = 8 + 2
    EXPECT_EQ(a[127][0].item<int64_t>(), 15);  // 8 + floor(7.98)
    EXPECT_EQ(a[299][0].item<int64_t>(), 15);  // capped
    EXPECT_EQ(b[0][299].item<int64_t>(), 31);
}

T5Config tiny_config() {
    T5Config c;
    c.vocab_size = 20;
    c.d_model = 8;
    c.d_kv = 4;
    c.d_ff = 12;
    c.num_layers = 2;
    c.num_heads = 2;
    return c;
}

TEST(T5Encoder, EmbedTokensIsTiedToShared) {
    test::TempDir dir;
    torch::manual_seed(3);
    T5EncoderModel source(tiny_config());
    NamedTensors tensors;
    for (const auto& p : source->named_parameters()) {
        // transformers 4 checkpoints may hold the embedding under its tied name only.
        tensors.emplace_back(p.key() == "shared.weight" ? "encoder.embed_tokens.weight" : p.key(),
                             p.value());
    }
    write_tensors(dir / "model.safetensors", tensors);
    T5EncoderModel loaded(tiny_config());
    load_t5_weights(*loaded, {dir / "model.safetensors"}, "T5 test");
    torch::NoGradGuard no_grad;
    const at::Tensor ids = torch::tensor({{1, 5, 7, 0}}, torch::kLong);
    EXPECT_TRUE(at::allclose(source->forward(ids), loaded->forward(ids)));
    // A mask changes what padded positions see.
    EXPECT_FALSE(
        at::allclose(loaded->forward(ids), loaded->forward(ids, torch::tensor({{1, 1, 1, 0}}))));
    tensors.pop_back();
    write_tensors(dir / "short.safetensors", tensors);
    EXPECT_THROW(load_t5_weights(*loaded, {dir / "short.safetensors"}, "T5 test"), FormatError);
}

TEST(T5Encoder, ConfigReadsT5AndUMT5AndRefusesWhatItLacks) {
    test::TempDir dir;
    std::ofstream(dir / "t5.json") << R"({"model_type": "t5", "d_model": 16, "num_layers": 3,
        "feed_forward_proj": "gated-gelu"})";
    const T5Config t5 = read_t5_config(dir / "t5.json");
    EXPECT_EQ(t5.d_model, 16);
    EXPECT_TRUE(t5.gated_act);
    EXPECT_EQ(t5.act, "gelu_new");
    EXPECT_FALSE(t5.bias_in_every_layer);
    std::ofstream(dir / "umt5.json") << R"({"model_type": "umt5", "feed_forward_proj": "relu"})";
    const T5Config umt5 = read_t5_config(dir / "umt5.json");
    EXPECT_TRUE(umt5.bias_in_every_layer);
    EXPECT_FALSE(umt5.gated_act);
    std::ofstream(dir / "bad.json") << R"({"model_type": "t5", "feed_forward_proj": "gated-tanh"})";
    expect_format_error([&] { read_t5_config(dir / "bad.json"); }, "feed_forward_proj");
    std::ofstream(dir / "mt5.json") << R"({"model_type": "bert"})";
    expect_format_error([&] { read_t5_config(dir / "mt5.json"); }, "model_type");
}

}  // namespace
}  // namespace loom
