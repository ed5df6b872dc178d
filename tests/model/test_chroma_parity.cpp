// Chroma against diffusers (label `parity`, issue 40) on a tiny random ChromaPipeline folder:
// the transformer (Flux's blocks without their modulation Linears, fed by the distilled-guidance
// approximator, ChromaPipeline's attention mask added to the scores) within 1e-5 of
// ChromaTransformer2DModel; the prompt encoding (T5 under the tokenizer's mask, the text mask)
// within 1e-5 of ChromaPipeline.encode_prompt; the family's training prediction on cached
// conditioning equal to the transformer's with the pipeline's mask; previews (negative prompt,
// real classifier-free guidance) within 1e-4 of ChromaPipeline's images for the same seeds.
// References: tests/parity/flux_reference.py (build_chroma).

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <iostream>

#include "loom/model/chroma/chroma_family.h"
#include "loom/model/chroma/chroma_preview_sampler.h"
#include "loom/model/chroma/chroma_transformer.h"
#include "loom/model/family.h"
#include "parity_cases.h"

namespace loom {
namespace {

using testing::max_error;
using testing::parity_dir;
using testing::read_case;

ChromaInputs chroma_inputs(const std::map<std::string, at::Tensor>& in) {
    ChromaInputs x;
    x.hidden_states = in.at("hidden_states");
    x.encoder_hidden_states = in.at("encoder_hidden_states");
    x.timestep = in.at("timestep");
    x.img_ids = in.at("img_ids");
    x.txt_ids = in.at("txt_ids");
    x.attention_mask = in.at("attention_mask");
    return x;
}

TEST(ChromaParity, TransformerWithTheApproximatorAndTheMask) {
    ChromaTransformer2DModel model =
        load_chroma_transformer(parity_dir() / "chroma" / "transformer");
    EXPECT_EQ(model->config().modulation_count(), 3 * 2 + 12 * 2 + 2);
    const auto in = read_case("chroma_transformer.inputs.safetensors");
    const at::Tensor expected = read_case("chroma_transformer.expected.safetensors").at("sample");
    torch::NoGradGuard no_grad;
    ChromaInputs x = chroma_inputs(in);
    const at::Tensor got = model->forward(x);
    ASSERT_EQ(got.sizes(), expected.sizes());
    const double error = max_error(got, expected);
    std::cout << "chroma_transformer: max abs error " << error << " (tolerance 1e-5)\n";
    EXPECT_LE(error, 1e-5);

    // The mask's bias matters: without it the prediction is another one.
    x.attention_mask = at::Tensor();
    EXPECT_GT(max_error(model->forward(x), expected), 1e-4);
}

// Recomputing the blocks in backward gives the gradients of keeping their activations (to
// float32 rounding).
TEST(ChromaParity, CheckpointedBlocksGiveTheSameGradients) {
    ChromaTransformer2DModel model =
        load_chroma_transformer(parity_dir() / "chroma" / "transformer");
    const ChromaInputs x = chroma_inputs(read_case("chroma_transformer.inputs.safetensors"));
    auto gradients = [&](bool checkpointing) {
        model->set_gradient_checkpointing(checkpointing);
        model->zero_grad();
        model->forward(x).square().mean().backward();
        std::vector<at::Tensor> g;
        for (const auto& p : model->parameters()) g.push_back(p.grad().clone());
        return g;
    };
    const auto plain = gradients(false);
    const auto recomputed = gradients(true);
    ASSERT_EQ(plain.size(), recomputed.size());
    for (std::size_t i = 0; i < plain.size(); ++i) {
        // Relative to the gradient's size: the recompute may sum in another order.
        const double scale = std::max(plain[i].abs().max().item<double>(), 1e-12);
        EXPECT_LE(max_error(plain[i], recomputed[i]) / scale, 1e-5) << "parameter " << i;
    }
}

TEST(ChromaParity, PromptsAsChromaPipelineEncodesThem) {
    ChromaLoadOptions options;
    options.load_vae = false;
    ChromaModel chroma = load_chroma(parity_dir() / "chroma", options);
    std::ifstream in(parity_dir() / "cases" / "chroma_prompts.json");
    const nlohmann::json spec = nlohmann::json::parse(in);
    const auto prompts = spec["prompts"].get<std::vector<std::string>>();
    const auto expected = read_case("chroma_prompts.expected.safetensors");
    torch::NoGradGuard no_grad;
    const TextConditioning c =
        chroma.encode_prompts(prompts, spec["max_sequence_length"].get<std::size_t>());
    EXPECT_FALSE(c.text_embeds.defined());  // no CLIP
    const double context = max_error(c.context, expected.at("prompt_embeds"));
    std::cout << "chroma_prompts: max abs error T5 " << context << " (tolerance 1e-5)\n";
    EXPECT_LE(context, 1e-5);
    ASSERT_EQ(c.context_mask.sizes(), expected.at("attention_mask").sizes());
    EXPECT_TRUE(at::equal(c.context_mask, expected.at("attention_mask").to(at::kFloat)));

    // T5 runs under the tokenizer's mask: without it the padded prompts encode otherwise.
    const auto ids = chroma.tokenizer->encode(prompts[0], spec["max_sequence_length"]);
    const at::Tensor unmasked =
        chroma.text_encoder->forward(at::tensor(ids, at::kLong).unsqueeze(0));
    EXPECT_GT(max_error(unmasked, c.context.narrow(0, 0, 1)), 1e-4);

    // A cached caption's conditioning keeps its mask.
    const TextConditioning back = TextConditioning::from_named(c.to_named(1), "cache");
    EXPECT_TRUE(at::equal(back.context_mask, c.context_mask.narrow(0, 1, 1)));
}

// The family's training prediction: latents packed, sigma = t / 1000, the caption's mask joined
// with the image tokens' — the transformer's output for the reference inputs, unpacked.
TEST(ChromaParity, FamilyPredictsWithTheCaptionMask) {
    const auto family = load_model_family(parity_dir() / "chroma", {});
    ASSERT_EQ(family->arch(), config::Arch::kChroma);
    auto& chroma = dynamic_cast<ChromaFamily&>(*family);
    const auto in = read_case("chroma_transformer.inputs.safetensors");
    const at::Tensor expected = read_case("chroma_transformer.expected.safetensors").at("sample");
    const int64_t h = 8, w = 12;
    const int64_t text_tokens = in.at("encoder_hidden_states").size(1);
    StepConditioning c;
    c.context = in.at("encoder_hidden_states");
    c.context_mask = in.at("attention_mask").narrow(1, 0, text_tokens);
    const at::Tensor noisy = flux_unpack_latents(in.at("hidden_states"), h, w);
    torch::NoGradGuard no_grad;
    const at::Tensor got = chroma.predict(noisy, in.at("timestep") * 1000, c);
    EXPECT_LE(max_error(flux_pack_latents(got), expected), 1e-5);
    EXPECT_EQ(chroma.encoders().size(), 2u);  // Flux's VAE and T5
}

TEST(ChromaParity, SeededImagesAsChromaPipelineWithANegativePrompt) {
    ChromaModel chroma = load_chroma(parity_dir() / "chroma");
    std::ifstream in(parity_dir() / "cases" / "chroma_pipeline.json");
    const nlohmann::json spec = nlohmann::json::parse(in);
    const auto prompts = spec["prompts"].get<std::vector<std::string>>();
    const auto seeds = spec["seeds"].get<std::vector<int64_t>>();
    const std::string negative = spec["negative"];
    const int64_t width = spec["width"], height = spec["height"], steps = spec["steps"];
    const double guidance = spec["guidance"];
    const std::size_t tokens = spec["max_sequence_length"];
    const at::Tensor expected = read_case("chroma_pipeline.expected.safetensors").at("images");

    std::vector<at::Tensor> noise;
    for (int64_t seed : seeds) noise.push_back(flux_initial_noise(chroma.vae, seed, width, height));
    const std::vector<std::string> negatives(prompts.size(), negative);
    const at::Tensor images =
        chroma_sample(chroma, prompts, negatives, at::cat(noise), steps, guidance, tokens);
    const at::Tensor unit = (images / 2 + 0.5).clamp(0, 1);
    const double error = max_error(unit, expected);
    std::cout << "chroma_pipeline: max abs error " << error << " (tolerance 1e-4)\n";
    EXPECT_LE(error, 1e-4);

    // One doubled batch for both passes: the same images.
    const at::Tensor doubled = chroma_sample(chroma, prompts, negatives, at::cat(noise), steps,
                                             guidance, tokens, /*batch_guidance=*/true);
    EXPECT_LE(max_error((doubled / 2 + 0.5).clamp(0, 1), expected), 1e-4);

    // Without the negative pass (guidance 1) the images are other ones.
    const at::Tensor unguided =
        chroma_sample(chroma, prompts, negatives, at::cat(noise), steps, 1.0, tokens);
    EXPECT_GT(max_error((unguided / 2 + 0.5).clamp(0, 1), expected), 1e-3);

    std::vector<PreviewRequest> requests;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        PreviewRequest r;
        r.prompt = prompts[i];
        r.negative = negative;
        r.seed = seeds[i];
        r.width = width;
        r.height = height;
        r.steps = steps;
        r.guidance_scale = guidance;
        requests.push_back(r);
    }
    for (const bool batch : {true, false}) {
        PreviewOptions options;
        options.batch_prompts = batch;
        options.batch_guidance = batch;
        const auto rgb = generate_chroma_previews(chroma, requests, options, at::kCPU, tokens);
        ASSERT_EQ(rgb.size(), 2u);
        for (std::size_t i = 0; i < rgb.size(); ++i) {
            const at::Tensor want =
                (expected[static_cast<int64_t>(i)] * 255).round().permute({1, 2, 0});
            EXPECT_LE((rgb[i].to(at::kFloat) - want).abs().max().item<float>(), 1.0f)
                << "preview " << i << (batch ? " batched" : " alone");
        }
    }
}

}  // namespace
}  // namespace loom
