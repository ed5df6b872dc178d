// The T5 tokenizer and encoders against transformers (label `parity`): token ids equal
// T5Tokenizer's on every string of tests/parity/t5_reference.py's CASES for three tokenizer.json
// shapes, and T5EncoderModel / UMT5EncoderModel outputs within 1e-5. References come from
// tests/parity/make_reference.py.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "loom/model/loading/diffusers_folder.h"
#include "loom/model/loading/tensor_file.h"
#include "loom/model/loading/weight_files.h"
#include "loom/model/text/t5_encoder.h"
#include "loom/model/tokenizers/t5_tokenizer.h"
#include "parity_cases.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using testing::max_error;
using testing::parity_dir;
using testing::read_case;

std::string shown(const std::string& text) {
    return text.size() > 60 ? text.substr(0, 60) + "..." : text;
}

class T5TokenizerParity : public ::testing::TestWithParam<std::string> {};

TEST_P(T5TokenizerParity, IdsEqualTransformersOnEveryCase) {
    const fs::path folder = parity_dir() / "t5_tokenizer" / GetParam();
    const T5Tokenizer tok = T5Tokenizer::from_folder(folder);
    std::ifstream in(folder / "expected.json");
    ASSERT_TRUE(in.good()) << folder;
    const nlohmann::json expected = nlohmann::json::parse(in);
    const auto max_length = expected["max_length"].get<std::size_t>();
    std::size_t checked = 0;
    for (const auto& c : expected["cases"]) {
        const std::string text = c["text"].get<std::string>();
        SCOPED_TRACE(shown(text));
        std::vector<std::int64_t> ids = tok.tokenize(text);
        ids.push_back(tok.eos_id());
        EXPECT_EQ(ids, c["ids"].get<std::vector<std::int64_t>>());
        EXPECT_EQ(tok.encode(text, max_length), c["padded"].get<std::vector<std::int64_t>>());
        ++checked;
    }
    EXPECT_GE(checked, 70u);
}

INSTANTIATE_TEST_SUITE_P(Shapes, T5TokenizerParity,
                         ::testing::Values("v5", "legacy", "byte_fallback"));

void check_encoder(const std::string& model, const std::string& case_name, bool with_mask) {
    const fs::path dir = parity_dir() / model;
    T5EncoderModel encoder(read_t5_config(dir / "config.json"));
    load_t5_weights(*encoder, find_weight_files(dir), model);
    encoder->eval();
    const auto inputs = read_case(case_name + ".inputs.safetensors");
    const auto expected = read_case(case_name + ".expected.safetensors");
    torch::NoGradGuard no_grad;
    const at::Tensor mask = with_mask ? inputs.at("attention_mask") : at::Tensor();
    const at::Tensor out = encoder->forward(inputs.at("input_ids"), mask);
    ASSERT_EQ(out.sizes(), expected.at("last_hidden_state").sizes());
    const double error = max_error(out, expected.at("last_hidden_state"));
    std::cout << case_name << ": max abs error " << error << " (tolerance 1e-5)\n";
    EXPECT_LE(error, 1e-5);
}

TEST(T5EncoderParity, T5v11GatedGeluWithoutMaskAsFluxCallsIt) {
    check_encoder("t5", "t5_encoder", false);
}

TEST(T5EncoderParity, UMT5WithABiasPerLayerAndTheMaskAsWanCallsIt) {
    check_encoder("umt5", "umt5_encoder", true);
}

}  // namespace
}  // namespace loom
