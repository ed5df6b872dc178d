// The Qwen2 tokenizer against transformers' Qwen2Tokenizer (label `parity`): the tiny byte-level
// BPE of tests/parity/zimage_reference.py, trained with Qwen2's pre-tokenizer, gives transformers'
// ids on every string of its set (contractions in capitals, digit runs, whitespace and line
// breaks, NFC, CJK, emoji, special tokens typed in the text) and the same padded ids and mask as
// the pipelines ask for; saved without tokenizer.json (vocab.json and merges.txt, as Qwen-Image's
// own tokenizer/ folder is, its added tokens in tokenizer_config.json or added_tokens.json) it
// gives transformers' ids too. Also: a folder with neither layout and a bad padding_side are
// errors naming the file and key.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <utility>

#include "loom/core/error.h"
#include "loom/model/tokenizers/qwen2_tokenizer.h"
#include "parity_cases.h"
#include "temp_dir.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using testing::parity_dir;

nlohmann::json read_expected() {
    std::ifstream in(parity_dir() / "cases" / "qwen2_tokenizer.json");
    return nlohmann::json::parse(in);
}

TEST(Qwen2TokenizerParity, IdsAsTransformers) {
    const Qwen2Tokenizer tokenizer = Qwen2Tokenizer::from_folder(parity_dir() / "qwen2_tokenizer");
    const nlohmann::json expected = read_expected();
    EXPECT_EQ(tokenizer.size(), expected["vocab_size"].get<std::size_t>());
    EXPECT_EQ(tokenizer.pad_id(), expected["pad_id"].get<int64_t>());
    const auto& texts = expected["texts"];
    ASSERT_GE(texts.size(), 10U);
    for (std::size_t i = 0; i < texts.size(); ++i) {
        const std::string text = texts[i].get<std::string>();
        EXPECT_EQ(tokenizer.tokenize(text), expected["ids"][i].get<std::vector<int64_t>>())
            << "text " << i << ": " << text;
    }
}

TEST(Qwen2TokenizerParity, VocabAndMergesFilesAsTransformers) {
    const nlohmann::json expected = read_expected();
    const auto& texts = expected["texts"];
    const std::pair<const char*, const char*> layouts[] = {
        {"qwen2_tokenizer_files", "files_ids"}, {"qwen2_tokenizer_added_json", "added_json_ids"}};
    for (std::size_t l = 0; l < 2; ++l) {
        const auto& [folder, key] = layouts[l];
        ASSERT_FALSE(fs::exists(parity_dir() / folder / "tokenizer.json")) << folder;
        const Qwen2Tokenizer tokenizer = Qwen2Tokenizer::from_folder(parity_dir() / folder);
        EXPECT_EQ(tokenizer.size(), expected["files_vocab_sizes"][l].get<std::size_t>()) << folder;
        EXPECT_EQ(tokenizer.pad_id(), expected["files_pad_ids"][l].get<int64_t>()) << folder;
        for (std::size_t i = 0; i < texts.size(); ++i) {
            const std::string text = texts[i].get<std::string>();
            EXPECT_EQ(tokenizer.tokenize(text), expected[key][i].get<std::vector<int64_t>>())
                << folder << ", text " << i << ": " << text;
        }
    }
}

TEST(Qwen2TokenizerParity, PaddedAsThePipelinesCallIt) {
    const Qwen2Tokenizer tokenizer = Qwen2Tokenizer::from_folder(parity_dir() / "qwen2_tokenizer");
    const nlohmann::json expected = read_expected();
    const auto max_length = expected["max_length"].get<std::size_t>();
    const auto& texts = expected["texts"];
    bool some_truncated = false;
    for (std::size_t i = 0; i < texts.size(); ++i) {
        const std::string text = texts[i].get<std::string>();
        const Qwen2Tokenizer::Encoding e = tokenizer.encode(text, max_length);
        EXPECT_EQ(e.ids, expected["padded_ids"][i].get<std::vector<int64_t>>()) << text;
        EXPECT_EQ(e.mask, expected["padded_mask"][i].get<std::vector<int64_t>>()) << text;
        some_truncated = some_truncated || tokenizer.tokenize(text).size() > max_length;
    }
    EXPECT_TRUE(some_truncated) << "the set should cross max_length once";
}

TEST(Qwen2Tokenizer, InvalidUtf8IsAnErrorNamingTheTokenizerAndThePlace) {
    const Qwen2Tokenizer tokenizer = Qwen2Tokenizer::from_folder(parity_dir() / "qwen2_tokenizer");
    try {
        tokenizer.tokenize("a photo\nof \xff cat");
        FAIL() << "invalid UTF-8 tokenized";
    } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("Qwen2 tokenizer: the text is not valid UTF-8 (line 2, column 4"),
                  std::string::npos)
            << what;
    }
}

TEST(Qwen2Tokenizer, ErrorsNameTheFileAndKey) {
    const test::TempDir dir;
    EXPECT_THROW(
        {
            try {
                Qwen2Tokenizer::from_folder(dir.path());
            } catch (const IoError& e) {
                const std::string what = e.what();
                EXPECT_NE(what.find("tokenizer.json"), std::string::npos) << what;
                EXPECT_NE(what.find("vocab.json and merges.txt"), std::string::npos) << what;
                throw;
            }
        },
        IoError);
    fs::copy_file(parity_dir() / "qwen2_tokenizer" / "tokenizer.json",
                  dir.path() / "tokenizer.json");
    std::ofstream(dir.path() / "tokenizer_config.json") << R"({"padding_side": "middle"})";
    try {
        Qwen2Tokenizer::from_folder(dir.path());
        FAIL() << "a bad padding_side loaded";
    } catch (const FormatError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("tokenizer_config.json"), std::string::npos) << what;
        EXPECT_NE(what.find("padding_side"), std::string::npos) << what;
    }
    std::ofstream(dir.path() / "tokenizer_config.json") << R"({"pad_token": "<|nothing|>"})";
    EXPECT_THROW(Qwen2Tokenizer::from_folder(dir.path()), FormatError);
}

}  // namespace
}  // namespace loom
