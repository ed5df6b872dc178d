// Flux.1 Kontext against diffusers (label `parity`, issue 40): the family's prediction with
// control latents (joined on the sequence with their ids marked 1, the output trimmed to the
// target's tokens, as ai-toolkit's flux_kontext computes it) within 1e-5, and previews with a
// control image against FluxKontextPipeline within 1e-4. References:
// tests/parity/flux_reference.py.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <fstream>
#include <iostream>

#include "loom/config/arch.h"
#include "loom/model/family.h"
#include "loom/model/flux/flux_preview_sampler.h"
#include "parity_cases.h"

namespace loom {
namespace {

using testing::max_error;
using testing::parity_dir;
using testing::read_case;

TEST(FluxKontextParity, PredictionWithControlLatentsAsAiToolkit) {
    std::unique_ptr<ModelFamily> family = load_model_family(parity_dir() / "flux_kontext");
    EXPECT_EQ(family->arch(), config::Arch::kFluxKontext);
    const auto in = read_case("flux_kontext_predict.inputs.safetensors");
    const at::Tensor expected =
        read_case("flux_kontext_predict.expected.safetensors").at("prediction");
    StepConditioning c;
    c.context = in.at("context");
    c.pooled = in.at("pooled");
    c.control = in.at("control");
    torch::NoGradGuard no_grad;
    const at::Tensor got = family->predict(in.at("noisy"), in.at("timesteps"), c);
    ASSERT_EQ(got.sizes(), expected.sizes());
    const double error = max_error(got, expected);
    std::cout << "flux_kontext_predict: max abs error " << error << " (tolerance 1e-5)\n";
    EXPECT_LE(error, 1e-5);

    // The control tokens matter: without them the prediction is another one.
    c.control = at::Tensor();
    EXPECT_GT(max_error(family->predict(in.at("noisy"), in.at("timesteps"), c), expected), 1e-3);
}

TEST(FluxKontextParity, PreviewsWithAControlImageAsTheKontextPipeline) {
    FluxModel kontext = load_flux(parity_dir() / "flux_kontext");
    std::ifstream in(parity_dir() / "cases" / "flux_kontext_pipeline.json");
    const nlohmann::json spec = nlohmann::json::parse(in);
    const auto prompts = spec["prompts"].get<std::vector<std::string>>();
    const auto seeds = spec["seeds"].get<std::vector<int64_t>>();
    const at::Tensor controls =
        read_case("flux_kontext_pipeline.inputs.safetensors").at("controls");
    const at::Tensor expected =
        read_case("flux_kontext_pipeline.expected.safetensors").at("images");

    std::vector<PreviewRequest> requests;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        PreviewRequest r;
        r.prompt = prompts[i];
        r.seed = seeds[i];
        r.width = spec["width"];
        r.height = spec["height"];
        r.steps = spec["steps"];
        r.guidance_scale = spec["guidance"];
        r.control = controls[static_cast<int64_t>(i)] * 2 - 1;  // the image processor's mapping
        requests.push_back(r);
    }
    const std::size_t tokens = spec["max_sequence_length"];
    std::vector<at::Tensor> noise;
    for (const PreviewRequest& r : requests) {
        noise.push_back(flux_initial_noise(kontext, r.seed, r.width, r.height));
    }
    const at::Tensor images = flux_sample(kontext, prompts, at::cat(noise), requests[0].steps,
                                          requests[0].guidance_scale, tokens, controls * 2 - 1);
    const double error = max_error((images / 2 + 0.5).clamp(0, 1), expected);
    std::cout << "flux_kontext_pipeline: max abs error " << error << " (tolerance 1e-4)\n";
    EXPECT_LE(error, 1e-4);

    for (const bool batch : {true, false}) {
        PreviewOptions options;
        options.batch_prompts = batch;
        const auto rgb = generate_flux_previews(kontext, requests, options, at::kCPU, tokens);
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
