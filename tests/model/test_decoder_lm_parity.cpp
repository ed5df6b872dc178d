// The decoder LM against transformers (label `parity`): Qwen2.5-VL's language model (Qwen-Image's
// text encoder) and Qwen3 (Z-Image's) loaded from the tiny random folders of
// tests/parity/qwen_reference.py, their hidden states within 1e-5 of the text model's
// hidden_states[-1], [-2] and [0] on a right-padded batch, and Qwen2.5-VL with three different
// position rows (the multimodal rotary embedding an image's tokens use). Also: config errors
// name the key.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "loom/core/error.h"
#include "loom/model/text/decoder_lm.h"
#include "parity_cases.h"
#include "temp_dir.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using testing::max_error;
using testing::parity_dir;
using testing::read_case;

// Only the positions of real tokens: the reference's rows for padding are never used.
double error_on_tokens(const at::Tensor& out, const at::Tensor& expected, const at::Tensor& mask) {
    const at::Tensor keep = mask.to(at::kBool).unsqueeze(-1).expand_as(out);
    return max_error(out.masked_select(keep), expected.masked_select(keep));
}

void check(const std::string& model, const char* name, const at::Tensor& out,
           const at::Tensor& expected, const at::Tensor& mask) {
    ASSERT_EQ(out.sizes(), expected.sizes()) << name;
    const double error = error_on_tokens(out, expected, mask);
    std::cout << model << " " << name << ": max abs error " << error << " (tolerance 1e-5)\n";
    EXPECT_LE(error, 1e-5) << name;
}

TEST(DecoderLMParity, Qwen2_5_VLLanguageModelAsQwenImageCallsIt) {
    DecoderLM lm = load_decoder_lm(parity_dir() / "qwen2_5_vl");
    EXPECT_EQ(lm->config().mrope_section, (std::vector<int64_t>{1, 1, 2}));
    EXPECT_TRUE(lm->config().attention_bias);
    EXPECT_FALSE(lm->config().qk_norm);
    const auto in = read_case("decoder_lm_qwen2_5_vl.inputs.safetensors");
    const auto want = read_case("decoder_lm_qwen2_5_vl.expected.safetensors");
    torch::NoGradGuard no_grad;
    const at::Tensor ids = in.at("input_ids");
    const at::Tensor mask = in.at("attention_mask");
    check("qwen2.5-vl", "hidden_states[-1]", lm->forward(ids, mask), want.at("last"), mask);
    check("qwen2.5-vl", "hidden_states[-2]", lm->forward(ids, mask, -2), want.at("second_to_last"),
          mask);
    check("qwen2.5-vl", "hidden_states[0]", lm->forward(ids, mask, 0), want.at("embeddings"), mask);
    check("qwen2.5-vl", "three position rows",
          lm->forward_embeds(lm->embed(ids), mask, in.at("position_ids")), want.at("three_rows"),
          mask);
    // The rows matter: the same run with text positions is not the three-row reference.
    EXPECT_GT(error_on_tokens(lm->forward(ids, mask), want.at("three_rows"), mask), 1e-3);
}

TEST(DecoderLMParity, Qwen3AsZImageCallsIt) {
    DecoderLM lm = load_decoder_lm(parity_dir() / "qwen3");
    EXPECT_EQ(lm->config().head_dim, 12);
    EXPECT_TRUE(lm->config().qk_norm);
    EXPECT_FALSE(lm->config().attention_bias);
    EXPECT_TRUE(lm->config().mrope_section.empty());
    const auto in = read_case("decoder_lm_qwen3.inputs.safetensors");
    const auto want = read_case("decoder_lm_qwen3.expected.safetensors");
    torch::NoGradGuard no_grad;
    const at::Tensor ids = in.at("input_ids");
    const at::Tensor mask = in.at("attention_mask");
    check("qwen3", "hidden_states[-2]", lm->forward(ids, mask, -2), want.at("second_to_last"),
          mask);
    check("qwen3", "hidden_states[-1]", lm->forward(ids, mask), want.at("last"), mask);
}

TEST(DecoderLMParity, PaddingDoesNotReachTheRealTokens) {
    // A prompt alone and the same prompt padded in a batch: its tokens' states agree.
    DecoderLM lm = load_decoder_lm(parity_dir() / "qwen3");
    const auto in = read_case("decoder_lm_qwen3.inputs.safetensors");
    torch::NoGradGuard no_grad;
    const at::Tensor padded = lm->forward(in.at("input_ids"), in.at("attention_mask"));
    const int64_t real = in.at("attention_mask")[1].sum().item<int64_t>();
    const at::Tensor alone = lm->forward(in.at("input_ids").narrow(0, 1, 1).narrow(1, 0, real));
    EXPECT_LE(max_error(padded.narrow(0, 1, 1).narrow(1, 0, real), alone), 1e-5);
    EXPECT_TRUE(padded.isfinite().all().item<bool>());
}

TEST(DecoderLMConfigErrors, NameTheKey) {
    const test::TempDir dir;
    auto write = [&](const std::string& json) {
        std::ofstream(dir.path() / "config.json") << json;
        return dir.path() / "config.json";
    };
    auto message = [&](const std::string& json) {
        try {
            read_decoder_lm_config(write(json));
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_NE(message(R"({"model_type": "llama"})").find("model_type"), std::string::npos);
    EXPECT_NE(message(R"({"model_type": "qwen3", "hidden_act": "gelu"})").find("hidden_act"),
              std::string::npos);
    EXPECT_NE(message(R"({"model_type": "qwen2", "use_sliding_window": true})")
                  .find("use_sliding_window"),
              std::string::npos);
    EXPECT_NE(message(R"({"model_type": "qwen2_5_vl", "text_config": {"hidden_size": 64,
              "num_attention_heads": 2, "num_key_value_heads": 2,
              "rope_parameters": {"rope_type": "mrope", "mrope_section": [8, 8, 8]}}})")
                  .find("rope_parameters.mrope_section' sums to 24"),
              std::string::npos);
    EXPECT_NE(message(R"({"model_type": "qwen3", "rope_parameters": {"rope_type": "yarn"}})")
                  .find("yarn"),
              std::string::npos);
    // transformers 4's layout: everything at the top level, rope_scaling beside rope_theta.
    const DecoderLMConfig v4 = read_decoder_lm_config(write(R"({"model_type": "qwen2_5_vl",
        "hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
        "num_hidden_layers": 2, "rope_theta": 5000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]}})"));
    EXPECT_EQ(v4.head_dim, 32);
    EXPECT_EQ(v4.num_layers, 2);
    EXPECT_DOUBLE_EQ(v4.rope_theta, 5000.0);
    EXPECT_EQ(v4.mrope_section, (std::vector<int64_t>{4, 6, 6}));
}

}  // namespace
}  // namespace loom
