// Wan 2.2 14B as a model family against diffusers' WanPipeline with two experts (label `parity`):
// each expert's prediction within 1e-5 and the family's routing of a batch on both sides of the
// boundary; the previews' clips through both experts (high-noise at and above the boundary, as
// the pipeline switches) within 1e-4; the folder checks; the experts' spans and LoRA files.
// References come from tests/parity/wan_reference.py (build_wan22).

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <iostream>

#include "loom/core/error.h"
#include "loom/model/family.h"
#include "loom/model/wan/wan_preview_sampler.h"
#include "loom/model/wan22/wan22_family.h"
#include "parity_cases.h"
#include "temp_dir.h"

namespace loom {
namespace {

using testing::max_error;
using testing::parity_dir;
using testing::read_case;

const std::vector<std::string> kWan22Prompts = {"  a photo of  a sks dog &amp; a cat\n",
                                                "an astronaut riding a horse"};
const std::vector<std::string> kWan22Negatives = {"blurry", ""};

std::unique_ptr<ModelFamily> load_wan22_family(std::vector<bool> trained = {}) {
    FamilyLoadOptions o;
    o.trained_experts = std::move(trained);
    return load_model_family(parity_dir() / "wan22" / "pipeline", o);
}

TEST(Wan22Parity, EachExpertPredictsAsDiffusersAndSamplesGoToTheirExpert) {
    std::unique_ptr<ModelFamily> family = load_wan22_family();
    ASSERT_NE(dynamic_cast<Wan22Family*>(family.get()), nullptr);
    EXPECT_EQ(family->arch(), config::Arch::kWan22_14b);
    const auto in = read_case("wan22_pipeline.inputs.safetensors");
    const auto expected = read_case("wan22_pipeline.expected.safetensors");
    const at::Tensor clip = in.at("hidden_states");
    const at::Tensor t = in.at("timestep");  // 950 (high noise), 300 (low noise)
    const at::Tensor text = in.at("encoder_hidden_states");
    torch::NoGradGuard no_grad;
    auto& wan = dynamic_cast<Wan22Family&>(*family).model();
    const double high =
        max_error(wan.experts->transformer_1->forward(clip, t, text), expected.at("high"));
    const double low =
        max_error(wan.experts->transformer_2->forward(clip, t, text), expected.at("low"));
    std::cout << "wan22 experts: max abs error high " << high << ", low " << low
              << " (tolerance 1e-5)\n";
    EXPECT_LE(high, 1e-5);
    EXPECT_LE(low, 1e-5);
    // The router: the first sample through the high-noise expert, the second through the low.
    StepConditioning c;
    c.context = text;
    const at::Tensor routed = family->predict(clip, t, c);
    EXPECT_LE(max_error(routed.narrow(0, 0, 1), expected.at("high").narrow(0, 0, 1)), 1e-5);
    EXPECT_LE(max_error(routed.narrow(0, 1, 1), expected.at("low").narrow(0, 1, 1)), 1e-5);
    // A batch on one side goes whole to its expert; the placement hook hears which.
    std::vector<std::size_t> placed;
    family->set_expert_placement([&](std::size_t i) { placed.push_back(i); });
    family->predict(clip, at::full({2}, 875.0), c);  // the boundary itself is low noise
    family->predict(clip, at::full({2}, 876.0), c);
    EXPECT_EQ(placed, (std::vector<std::size_t>{Wan22Family::kLowNoise, Wan22Family::kHighNoise}));
}

// The gradient of a mixed batch flows to both experts' inputs as two separate runs give it.
TEST(Wan22Parity, AMixedBatchBackpropagatesThroughBothExperts) {
    std::unique_ptr<ModelFamily> family = load_wan22_family();
    const auto in = read_case("wan22_pipeline.inputs.safetensors");
    auto& wan = dynamic_cast<Wan22Family&>(*family).model();
    const at::Tensor clip = in.at("hidden_states").clone().requires_grad_(true);
    StepConditioning c;
    c.context = in.at("encoder_hidden_states");
    family->predict(clip, in.at("timestep"), c).pow(2).sum().backward();
    const at::Tensor one = in.at("hidden_states").narrow(0, 0, 1).clone().requires_grad_(true);
    const at::Tensor two = in.at("hidden_states").narrow(0, 1, 1).clone().requires_grad_(true);
    wan.experts->transformer_1
        ->forward(one, in.at("timestep").narrow(0, 0, 1), c.context.narrow(0, 0, 1))
        .pow(2)
        .sum()
        .backward();
    wan.experts->transformer_2
        ->forward(two, in.at("timestep").narrow(0, 1, 1), c.context.narrow(0, 1, 1))
        .pow(2)
        .sum()
        .backward();
    EXPECT_LE(max_error(clip.grad(), at::cat({one.grad(), two.grad()})), 1e-5);
}

TEST(Wan22Parity, PreviewsSampleThroughBothExpertsAsThePipeline) {
    std::unique_ptr<ModelFamily> family = load_wan22_family();
    auto& wan = dynamic_cast<Wan22Family&>(*family).model();
    const auto in = read_case("wan22_pipeline.inputs.safetensors");
    const auto expected = read_case("wan22_pipeline.expected.safetensors");
    std::vector<std::size_t> placed;
    family->set_expert_placement([&](std::size_t i) { placed.push_back(i); });
    for (const int64_t frames : {1, 5}) {
        const std::string n = std::to_string(frames);
        std::vector<PreviewRequest> requests(2);
        for (std::size_t i = 0; i < 2; ++i) {
            requests[i].prompt = kWan22Prompts[i];
            requests[i].negative = kWan22Negatives[i];
            requests[i].seed = 7 + static_cast<int64_t>(i);
            requests[i].width = 32;
            requests[i].height = 16;
            requests[i].steps = 4;
            requests[i].guidance_scale = 4.0;
            requests[i].frames = frames;
        }
        EXPECT_TRUE(at::equal(wan_initial_noise(wan.base, 7, 32, 16, frames),
                              in.at("noise_" + n).narrow(0, 0, 1)));
        // The sampler itself, on the reference's noise: every step, both experts.
        const double boundary = wan.boundary();
        const at::Tensor clip = wan_sample(
            wan.base, kWan22Prompts, kWan22Negatives, in.at("noise_" + n), 4, 4.0, 512,
            [&](double t) -> WanTransformer3DModelImpl& {
                return t >= boundary ? *wan.experts->transformer_1 : *wan.experts->transformer_2;
            });
        const double error = max_error(clip, expected.at("clip_" + n));
        std::cout << "wan22 preview, " << frames << " frame(s): max abs error " << error
                  << " (tolerance 1e-4)\n";
        EXPECT_LE(error, 1e-4);
        // The family's previews: the same clips in 8 bits.
        const auto images = family->sample(requests, PreviewOptions{}, at::kCPU);
        ASSERT_EQ(images.size(), 2u);
        for (int64_t k = 0; k < 2; ++k) {
            const auto want = to_rgb8(expected.at("clip_" + n)[k].transpose(0, 1));
            const at::Tensor got = frames == 1 ? images[k].unsqueeze(0) : images[k];
            EXPECT_LE((got.to(at::kInt) - at::stack(want).to(at::kInt)).abs().max().item<int>(), 1);
        }
    }
    // 4 steps at shift 3 are t = 1000 (high noise), then about 858, 602, 9 (low noise).
    ASSERT_GE(placed.size(), 4u);
    EXPECT_EQ(std::vector<std::size_t>(placed.begin(), placed.begin() + 4),
              (std::vector<std::size_t>{0, 1, 1, 1}));
}

TEST(Wan22Family, SpansShiftBlocksAndTrainedExperts) {
    std::unique_ptr<ModelFamily> family = load_wan22_family({true, false});
    const std::vector<ExpertSpan> spans = family->expert_spans();
    ASSERT_EQ(spans.size(), 2u);
    EXPECT_DOUBLE_EQ(spans[0].above, 875.0);
    EXPECT_TRUE(spans[0].contains(876.0) && !spans[0].contains(875.0));
    EXPECT_TRUE(spans[1].contains(875.0) && spans[1].contains(1.0));
    EXPECT_EQ(family->trained_experts(), (std::vector<bool>{true, false}));
    EXPECT_DOUBLE_EQ(family->flow_match().shift, 5.0);  // ai-toolkit trains Wan 2.2 at shift 5
    EXPECT_TRUE(family->blocks().contains("transformer_2.blocks.0.attn1.to_q"));
    EXPECT_FALSE(family->blocks().contains("transformer_1.condition_embedder.time_proj"));
    ASSERT_EQ(family->blocks().experts.size(), 2u);
    EXPECT_EQ(family->blocks().expert_of("transformer_2.blocks.1.ffn.net.2")->file_suffix,
              "_low_noise");
    EXPECT_EQ(family->expert(0), family->denoiser().named_children()["transformer_1"].get());
    EXPECT_THROW(load_wan22_family({false, false}), Error);
}

TEST(Wan22Folder, OneTransformerTheFiveBAndABadBoundaryAreRefusedByName) {
    test::TempDir dir;
    const auto load_error = [&](const std::string& index) {
        std::ofstream(dir / "model_index.json") << index;
        try {
            load_wan22(dir.path());
        } catch (const FormatError& e) {
            return std::string(e.what());
        }
        return std::string("loaded");
    };
    EXPECT_NE(load_error(R"({"_class_name": "WanPipeline",
        "transformer": ["diffusers", "WanTransformer3DModel"]})")
                  .find("has no 'transformer_2': a Wan 2.1 folder"),
              std::string::npos);
    EXPECT_NE(load_error(R"({"_class_name": "WanPipeline", "expand_timesteps": true,
        "transformer": ["diffusers", "WanTransformer3DModel"]})")
                  .find("TI2V 5B"),
              std::string::npos);
    std::filesystem::create_directories(dir / "transformer_2");
    EXPECT_NE(load_error(R"({"_class_name": "WanPipeline", "boundary_ratio": 1.5,
        "transformer": ["diffusers", "WanTransformer3DModel"],
        "transformer_2": ["diffusers", "WanTransformer3DModel"]})")
                  .find("'boundary_ratio' must lie between 0 and 1"),
              std::string::npos);
    // Experts that take different inputs: named by the low-noise expert's config.
    std::filesystem::create_directories(dir / "transformer");
    std::ofstream(dir / "transformer" / "config.json") << R"({"in_channels": 16})";
    std::ofstream(dir / "transformer_2" / "config.json") << R"({"in_channels": 36})";
    const std::string mismatch = load_error(R"({"_class_name": "WanPipeline",
        "transformer": ["diffusers", "WanTransformer3DModel"],
        "transformer_2": ["diffusers", "WanTransformer3DModel"]})");
    EXPECT_NE(mismatch.find("transformer_2/config.json"), std::string::npos) << mismatch;
    EXPECT_NE(mismatch.find("the two experts of a Wan 2.2 folder take the same inputs"),
              std::string::npos)
        << mismatch;
}

}  // namespace
}  // namespace loom
