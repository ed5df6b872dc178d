// Qwen-Image's transformer against diffusers (label `parity`), on the tiny random
// QwenImageTransformer2DModel of tests/parity/qwen_reference.py: the prediction for a batch whose
// second prompt is padded (the joint attention under the text mask) within 1e-5; the mask and
// the MSRoPE positions matter; gradient checkpointing keeps the gradients; configs loom does not
// build are errors naming the key. AutoencoderKLQwenImage encodes and decodes within 1e-4 on
// loom's Wan VAE.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <iostream>

#include "loom/core/error.h"
#include "loom/model/loading/weight_files.h"
#include "loom/model/qwenimage/qwenimage_model.h"
#include "loom/model/qwenimage/qwenimage_preview_sampler.h"
#include "loom/model/qwenimage/qwenimage_transformer.h"
#include "loom/model/vae/wan_vae.h"
#include "parity_cases.h"
#include "temp_dir.h"

namespace loom {
namespace {

using testing::max_error;
using testing::parity_dir;
using testing::read_case;

QwenImageInputs case_inputs() {
    const auto in = read_case("qwenimage_transformer.inputs.safetensors");
    QwenImageInputs inputs;
    inputs.hidden_states = in.at("hidden_states");
    inputs.encoder_hidden_states = in.at("encoder_hidden_states");
    inputs.encoder_hidden_states_mask = in.at("encoder_hidden_states_mask");
    inputs.timestep = in.at("timestep");
    inputs.height = 4;
    inputs.width = 6;
    return inputs;
}

TEST(QwenImageParity, TransformerAsDiffusersUnderTheTextMask) {
    QwenImageTransformer2DModel transformer =
        load_qwenimage_transformer(parity_dir() / "qwenimage_transformer");
    EXPECT_EQ(transformer->config().blocks.out_channels, 64);
    const at::Tensor expected =
        read_case("qwenimage_transformer.expected.safetensors").at("sample");
    torch::NoGradGuard no_grad;
    const QwenImageInputs inputs = case_inputs();
    const double error = max_error(transformer->forward(inputs), expected);
    std::cout << "qwenimage_transformer: max abs error " << error << " (tolerance 1e-5)\n";
    EXPECT_LE(error, 1e-5);

    // Without the mask the padded prompt's prediction changes; the first one's does not.
    QwenImageInputs unmasked = inputs;
    unmasked.encoder_hidden_states_mask = at::Tensor();
    const at::Tensor out = transformer->forward(unmasked);
    EXPECT_LE(max_error(out[0], expected[0]), 1e-5);
    EXPECT_GT(max_error(out[1], expected[1]), 1e-3);
    // The grid's shape is the rotary embedding's: 6 x 4 is another prediction.
    QwenImageInputs transposed = inputs;
    std::swap(transposed.height, transposed.width);
    EXPECT_GT(max_error(transformer->forward(transposed), expected), 1e-3);
}

TEST(QwenImageParity, GradientCheckpointingKeepsTheGradients) {
    QwenImageTransformer2DModel transformer =
        load_qwenimage_transformer(parity_dir() / "qwenimage_transformer");
    const QwenImageInputs inputs = case_inputs();
    const auto grads = [&](bool checkpointing) {
        transformer->zero_grad();
        transformer->set_gradient_checkpointing(checkpointing);
        transformer->forward(inputs).square().mean().backward();
        return transformer->blocks()[0]
            ->named_parameters()["attn.add_q_proj.weight"]
            .grad()
            .clone();
    };
    const at::Tensor plain = grads(false);
    EXPECT_GT(plain.abs().max().item<double>(), 0.0);
    EXPECT_LE(max_error(grads(true), plain), 1e-6);
}

// AutoencoderKLQwenImage is Wan 2.1's VAE under its own config keys: loom's Wan VAE loads it.
TEST(QwenImageParity, VaeAsDiffusersOnOneFrame) {
    const std::filesystem::path dir = parity_dir() / "qwenimage_vae";
    AutoencoderKLWan vae(read_wan_vae_config(dir / "config.json"));
    EXPECT_EQ(vae->config().in_channels, 3);
    EXPECT_EQ(vae->config().out_channels, 3);
    load_weights(*vae, find_weight_files(dir), "Qwen-Image VAE");
    vae->eval();
    const auto in = read_case("qwenimage_vae.inputs.safetensors");
    const auto expected = read_case("qwenimage_vae.expected.safetensors");
    torch::NoGradGuard no_grad;
    const LatentDistribution dist = vae->encode(in.at("image"));
    const double encode_error = std::max(max_error(dist.mean, expected.at("mean")),
                                         max_error(dist.logvar, expected.at("logvar")));
    const double decode_error = max_error(vae->decode(in.at("latents")), expected.at("decoded"));
    std::cout << "qwenimage_vae: encode max abs error " << encode_error << ", decode "
              << decode_error << " (tolerance 1e-4)\n";
    EXPECT_LE(encode_error, 1e-4);
    EXPECT_LE(decode_error, 1e-4);
}

TEST(QwenImageParity, PromptEmbeddingsAsTheQwenImagePipeline) {
    QwenImageLoadOptions options;
    options.load_vae = false;
    QwenImageModel model = load_qwenimage(parity_dir() / "qwenimage", options);
    std::ifstream spec_file(parity_dir() / "cases" / "qwenimage_prompts.json");
    const auto prompts =
        nlohmann::json::parse(spec_file)["prompts"].get<std::vector<std::string>>();
    const auto expected = read_case("qwenimage_prompts.expected.safetensors");
    torch::NoGradGuard no_grad;
    const TextConditioning c = model.encode_prompts(prompts);
    ASSERT_EQ(c.context.sizes(), expected.at("prompt_embeds").sizes());
    EXPECT_TRUE(c.context_mask.equal(expected.at("mask").to(at::kFloat)));
    const double error = max_error(c.context, expected.at("prompt_embeds"));
    std::cout << "qwenimage_prompts: max abs error " << error << " (tolerance 1e-5)\n";
    EXPECT_LE(error, 1e-5);
    // max_sequence_length cuts every prompt's rows, as encode_prompt does.
    const TextConditioning cut = model.encode_prompts(prompts, 20);
    EXPECT_EQ(cut.context.size(1), 20);
    EXPECT_LE(max_error(cut.context, expected.at("prompt_embeds").narrow(1, 0, 20)), 1e-5);
}

TEST(QwenImageParity, SamplerSigmasWithTheExponentialShiftAndTheTerminalStretch) {
    const FlowMatchConfig config =
        read_flow_match_config(parity_dir() / "qwenimage" / "scheduler" / "scheduler_config.json");
    ASSERT_TRUE(config.shift_terminal.has_value());
    const auto expected = read_case("qwenimage_sigmas.expected.safetensors");
    for (const auto& [steps, tokens] : {std::pair<int64_t, int64_t>{3, 24}, {7, 1024}}) {
        const FlowMatchEulerSampler sampler(config, steps, tokens);
        const std::string key = "sigmas_" + std::to_string(steps) + "_" + std::to_string(tokens);
        EXPECT_LE(max_error(sampler.sigmas(), expected.at(key)), 1e-6) << key;
    }
    // Without the stretch the last sigma is not 0.02.
    FlowMatchConfig unstretched = config;
    unstretched.shift_terminal.reset();
    EXPECT_GT(
        max_error(FlowMatchEulerSampler(unstretched, 3, 24).sigmas(), expected.at("sigmas_3_24")),
        1e-3);
}

TEST(QwenImageParity, SeededImagesAsQwenImagePipelineWithTrueCfg) {
    QwenImageModel model = load_qwenimage(parity_dir() / "qwenimage");
    std::ifstream in(parity_dir() / "cases" / "qwenimage_pipeline.json");
    const nlohmann::json spec = nlohmann::json::parse(in);
    const auto prompts = spec["prompts"].get<std::vector<std::string>>();
    const auto seeds = spec["seeds"].get<std::vector<int64_t>>();
    const std::vector<std::string> negatives(prompts.size(), spec["negative"].get<std::string>());
    const int64_t width = spec["width"], height = spec["height"], steps = spec["steps"];
    const double guidance = spec["guidance"];
    const at::Tensor expected = read_case("qwenimage_pipeline.expected.safetensors").at("images");
    std::vector<at::Tensor> noise;
    for (int64_t seed : seeds) noise.push_back(qwenimage_initial_noise(model, seed, width, height));
    for (const bool batch : {false, true}) {
        const at::Tensor images = qwenimage_sample(model, prompts, negatives, at::cat(noise), steps,
                                                   guidance, 1024, batch);
        const double error = max_error((images / 2 + 0.5).clamp(0, 1), expected);
        std::cout << "qwenimage_pipeline" << (batch ? " (one batch)" : " (two passes)")
                  << ": max abs error " << error << " (tolerance 1e-4)\n";
        EXPECT_LE(error, 1e-4);
    }
    const at::Tensor unguided =
        qwenimage_sample(model, prompts, negatives, at::cat(noise), steps, 1.0, 1024);
    EXPECT_GT(max_error((unguided / 2 + 0.5).clamp(0, 1), expected), 1e-3);
}

TEST(QwenImageConfig, OptionsLoomDoesNotBuildNameTheKey) {
    const test::TempDir dir;
    std::ofstream(dir.path() / "config.json")
        << R"({"_class_name": "QwenImageTransformer2DModel", "zero_cond_t": true})";
    try {
        read_qwenimage_config(dir.path() / "config.json");
        FAIL() << "zero_cond_t loaded";
    } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("'zero_cond_t'"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace loom
