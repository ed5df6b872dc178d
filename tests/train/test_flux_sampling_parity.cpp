// Flux previews against diffusers' FluxPipeline (label `parity`): the same seeds give the same
// images — prompt encoding, seeded noise, the shifted Euler schedule, the guidance embedding,
// unpacking and the VAE — within 1e-4 on [0, 1] pixels. And loom's uint8 previews of those
// requests are those images.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <fstream>
#include <iostream>

#include "loom/model/flux/flux_preview_sampler.h"
#include "parity_cases.h"

namespace loom {
namespace {

using testing::max_error;
using testing::parity_dir;
using testing::read_case;

TEST(FluxSamplingParity, SeededImagesAsTheFluxPipeline) {
    FluxModel flux = load_flux(parity_dir() / "flux");
    std::ifstream in(parity_dir() / "cases" / "flux_pipeline.json");
    const nlohmann::json spec = nlohmann::json::parse(in);
    const auto prompts = spec["prompts"].get<std::vector<std::string>>();
    const auto seeds = spec["seeds"].get<std::vector<int64_t>>();
    const int64_t width = spec["width"], height = spec["height"], steps = spec["steps"];
    const double guidance = spec["guidance"];
    const std::size_t tokens = spec["max_sequence_length"];
    const at::Tensor expected = read_case("flux_pipeline.expected.safetensors").at("images");

    std::vector<at::Tensor> noise;
    for (int64_t seed : seeds) noise.push_back(flux_initial_noise(flux, seed, width, height));
    const at::Tensor images = flux_sample(flux, prompts, at::cat(noise), steps, guidance, tokens);
    const at::Tensor unit = (images / 2 + 0.5).clamp(0, 1);  // the pipeline's postprocess
    const double error = max_error(unit, expected);
    std::cout << "flux_pipeline: max abs error " << error << " (tolerance 1e-4)\n";
    EXPECT_LE(error, 1e-4);

    // The previews the trainer and `loom sample` write: one request at a time or batched.
    std::vector<PreviewRequest> requests;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        PreviewRequest r;
        r.prompt = prompts[i];
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
        const auto rgb = generate_flux_previews(flux, requests, options, at::kCPU, tokens);
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
