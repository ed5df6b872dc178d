// Z-Image against diffusers (label `parity`), on the tiny random ZImagePipeline of
// tests/parity/zimage_reference.py: the transformer on a batch whose captions have 5 and 21
// tokens (each padded to 32 inside, the first masked against the second's length) within 1e-5;
// ZImagePipeline.encode_prompt (chat template, Qwen3's hidden_states[-2] of the real tokens)
// within 1e-5; the pipeline's seeded images with a negative prompt within 1e-4, in one doubled
// batch or two passes; and the family's load, blocks and objective as ai-toolkit trains it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <fstream>
#include <iostream>

#include "loom/core/error.h"
#include "loom/model/family.h"
#include "loom/model/flux/flux_preview_sampler.h"
#include "loom/model/zimage/zimage_family.h"
#include "loom/model/zimage/zimage_preview_sampler.h"
#include "parity_cases.h"

namespace loom {
namespace {

using testing::max_error;
using testing::parity_dir;
using testing::read_case;

nlohmann::json read_spec(const char* name) {
    std::ifstream in(parity_dir() / "cases" / name);
    return nlohmann::json::parse(in);
}

ZImageInputs transformer_inputs() {
    const auto in = read_case("zimage_transformer.inputs.safetensors");
    ZImageInputs inputs;
    inputs.latents = in.at("latents");
    const at::Tensor first = in.at("caption_0");
    const at::Tensor second = in.at("caption_1");
    // The first caption padded with garbage rows: only its length's rows may be read.
    const at::Tensor padded =
        at::cat({first, at::full({second.size(0) - first.size(0), first.size(1)}, 7.0)});
    inputs.captions = at::stack({padded, second});
    inputs.caption_lengths = {first.size(0), second.size(0)};
    inputs.timestep = in.at("timestep");
    return inputs;
}

TEST(ZImageParity, TransformerAsDiffusersOnCaptionsOfTwoLengths) {
    ZImageTransformer2DModel transformer =
        load_zimage_transformer(parity_dir() / "zimage" / "transformer");
    const at::Tensor expected = read_case("zimage_transformer.expected.safetensors").at("sample");
    torch::NoGradGuard no_grad;
    const ZImageInputs inputs = transformer_inputs();
    const at::Tensor out = transformer->forward(inputs);
    const double error = max_error(out, expected);
    std::cout << "zimage_transformer: max abs error " << error << " (tolerance 1e-5)\n";
    EXPECT_LE(error, 1e-5);

    // The first item alone (no batch padding, no mask): the same prediction.
    ZImageInputs alone = inputs;
    alone.latents = inputs.latents.narrow(0, 0, 1);
    alone.captions = inputs.captions.narrow(0, 0, 1).narrow(1, 0, inputs.caption_lengths[0]);
    alone.caption_lengths = {inputs.caption_lengths[0]};
    alone.timestep = inputs.timestep.narrow(0, 0, 1);
    EXPECT_LE(max_error(transformer->forward(alone), expected.narrow(0, 0, 1)), 1e-5);

    // The caption length matters: reading the garbage rows gives another prediction.
    ZImageInputs longer = inputs;
    longer.caption_lengths = {inputs.caption_lengths[1], inputs.caption_lengths[1]};
    EXPECT_GT(max_error(transformer->forward(longer).narrow(0, 0, 1), expected.narrow(0, 0, 1)),
              1e-3);
}

TEST(ZImageParity, GradientCheckpointingKeepsTheGradients) {
    ZImageTransformer2DModel transformer =
        load_zimage_transformer(parity_dir() / "zimage" / "transformer");
    const ZImageInputs inputs = transformer_inputs();
    const auto grads = [&](bool checkpointing) {
        transformer->zero_grad();
        transformer->set_gradient_checkpointing(checkpointing);
        transformer->forward(inputs).square().mean().backward();
        return transformer->main_blocks()[0]
            ->named_parameters()["attention.to_q.weight"]
            .grad()
            .clone();
    };
    const at::Tensor plain = grads(false);
    EXPECT_GT(plain.abs().max().item<double>(), 0.0);
    EXPECT_LE(max_error(grads(true), plain), 1e-6);
}

TEST(ZImageParity, PromptEmbeddingsAsTheZImagePipeline) {
    ZImageLoadOptions options;
    options.load_vae = false;
    ZImageModel model = load_zimage(parity_dir() / "zimage", options);
    const nlohmann::json spec = read_spec("zimage_prompts.json");
    const auto prompts = spec["prompts"].get<std::vector<std::string>>();
    const auto expected = read_case("zimage_prompts.expected.safetensors");
    torch::NoGradGuard no_grad;
    const TextConditioning c = model.encode_prompts(prompts, spec["max_sequence_length"]);
    const std::vector<int64_t> lengths = zimage_caption_lengths(c.context_mask);
    const at::Tensor want_lengths = expected.at("lengths");
    std::vector<at::Tensor> rows;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(lengths[i], want_lengths[static_cast<int64_t>(i)].item<int64_t>()) << i;
        rows.push_back(c.context[static_cast<int64_t>(i)].narrow(0, 0, lengths[i]));
    }
    const double error = max_error(at::cat(rows), expected.at("prompt_embeds"));
    std::cout << "zimage_prompts: max abs error " << error << " (tolerance 1e-5)\n";
    EXPECT_LE(error, 1e-5);
    // The rows past a prompt's tokens are zeros (never read by the transformer).
    EXPECT_EQ(c.context[0]
                  .narrow(0, lengths[0], c.context.size(1) - lengths[0])
                  .abs()
                  .max()
                  .item<float>(),
              0.0f);
}

TEST(ZImageParity, SeededImagesAsZImagePipelineWithANegativePrompt) {
    ZImageModel model = load_zimage(parity_dir() / "zimage");
    const nlohmann::json spec = read_spec("zimage_pipeline.json");
    const auto prompts = spec["prompts"].get<std::vector<std::string>>();
    const auto seeds = spec["seeds"].get<std::vector<int64_t>>();
    const std::string negative = spec["negative"];
    const int64_t width = spec["width"], height = spec["height"], steps = spec["steps"];
    const double guidance = spec["guidance"];
    const std::size_t tokens = spec["max_sequence_length"];
    const at::Tensor expected = read_case("zimage_pipeline.expected.safetensors").at("images");

    std::vector<at::Tensor> noise;
    for (int64_t seed : seeds) noise.push_back(flux_initial_noise(model.vae, seed, width, height));
    const std::vector<std::string> negatives(prompts.size(), negative);
    for (const bool batch : {true, false}) {
        const at::Tensor images = zimage_sample(model, prompts, negatives, at::cat(noise), steps,
                                                guidance, tokens, batch);
        const double error = max_error((images / 2 + 0.5).clamp(0, 1), expected);
        std::cout << "zimage_pipeline" << (batch ? " (one batch)" : " (two passes)")
                  << ": max abs error " << error << " (tolerance 1e-4)\n";
        EXPECT_LE(error, 1e-4);
    }
    // ai-toolkit's guidance 1 is one pass: other images.
    const at::Tensor unguided =
        zimage_sample(model, prompts, negatives, at::cat(noise), steps, 1.0, tokens);
    EXPECT_GT(max_error((unguided / 2 + 0.5).clamp(0, 1), expected), 1e-3);
}

TEST(ZImageFamily, LoadsAsAZImagePipelineAndPredictsAsAiToolkit) {
    auto family = load_model_family(parity_dir() / "zimage");
    EXPECT_EQ(family->arch(), config::Arch::kZImage);
    EXPECT_EQ(family->encoders().size(), 2u);  // Flux's VAE and Qwen3
    EXPECT_TRUE(family->blocks().contains("layers.1.attention.to_q"));
    EXPECT_FALSE(family->blocks().contains("noise_refiner.0.attention.to_q"));
    EXPECT_FALSE(family->blocks().contains("context_refiner.0.feed_forward.w1"));
    EXPECT_EQ(family->flow_match().shift, 3.0);
    EXPECT_FALSE(family->flow_match().use_dynamic_shifting);

    // predict(noisy, t x 1000) is minus the transformer at (1000 - t) / 1000.
    auto& zimage = dynamic_cast<ZImageFamily&>(*family);
    const ZImageInputs inputs = transformer_inputs();
    const at::Tensor expected = read_case("zimage_transformer.expected.safetensors").at("sample");
    StepConditioning c;
    c.context = inputs.captions;
    c.context_mask = at::zeros({2, inputs.captions.size(1)});
    c.context_mask[0].narrow(0, 0, inputs.caption_lengths[0]).fill_(1);
    c.context_mask[1].fill_(1);
    torch::NoGradGuard no_grad;
    const at::Tensor t = (1 - inputs.timestep) * 1000;
    EXPECT_LE(max_error(-zimage.predict(inputs.latents, t, c), expected), 1e-5);
}

TEST(ZImageFamily, AFolderWithoutItsTextEncoderIsAnError) {
    EXPECT_THROW(load_zimage(parity_dir() / "flux"), FormatError);
}

}  // namespace
}  // namespace loom
