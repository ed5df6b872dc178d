// Flex.2 against ai-toolkit's computation (label `parity`, issue 40) on a tiny random FluxPipeline
// folder of Flex.2's shape: the folder is detected as flex2 (its transformer takes 196 channels
// and gives 64), and the family's training prediction — the latents, the no-inpaint input (zeros
// and a mask of ones, or an inpaint image's masked latents and mask), the control latents or
// zeros on the channels, packed; the guidance embedding bypassed or at 1 — within 1e-5 of
// ai-toolkit's Flex2.condition_noisy_latents and get_noise_prediction as
// tests/parity/flux_reference.py (build_flex2) writes them.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <iostream>

#include "loom/model/family.h"
#include "loom/model/flux/flex2_channels.h"
#include "loom/model/flux/flux_family.h"
#include "parity_cases.h"

namespace loom {
namespace {

using testing::max_error;
using testing::parity_dir;
using testing::read_case;

StepConditioning flex2_conditioning(const std::map<std::string, at::Tensor>& in, bool control) {
    StepConditioning c;
    c.context = in.at("context");
    c.pooled = in.at("pooled");
    if (control) c.control = in.at("control");
    return c;
}

TEST(Flex2Parity, TheFolderIsFlex2AndItsChannelsAreAiToolkits) {
    EXPECT_EQ(detect_model_arch(parity_dir() / "flex2"), config::Arch::kFlex2);
    EXPECT_EQ(detect_model_arch(parity_dir() / "flux"), config::Arch::kFlux);
    EXPECT_EQ(flex2_in_channels(16), 196);
    const at::Tensor latents = at::randn({1, 16, 4, 6});
    const at::Tensor control = at::randn({1, 16, 4, 6});
    const at::Tensor x = flex2_channels(latents, control);
    ASSERT_EQ(x.size(1), 49);
    EXPECT_TRUE(at::equal(x.narrow(1, 0, 16), latents));
    EXPECT_EQ(x.narrow(1, 16, 16).count_nonzero().item<int64_t>(), 0);   // no inpaint latent
    EXPECT_TRUE(at::equal(x.narrow(1, 32, 1), at::ones({1, 1, 4, 6})));  // inpaint everything
    EXPECT_TRUE(at::equal(x.narrow(1, 33, 16), control));
    EXPECT_EQ(flex2_channels(latents, {}).narrow(1, 33, 16).count_nonzero().item<int64_t>(), 0);
}

TEST(Flex2Parity, PredictionAsAiToolkitComputesIt) {
    const auto in = read_case("flex2_predict.inputs.safetensors");
    const auto expected = read_case("flex2_predict.expected.safetensors");
    torch::NoGradGuard no_grad;
    for (const bool bypass : {true, false}) {
        FamilyLoadOptions options;
        options.bypass_guidance_embedding = bypass;
        const auto family = load_model_family(parity_dir() / "flex2", options);
        ASSERT_EQ(family->arch(), config::Arch::kFlex2);
        // bypassed with the control latents; at guidance 1 without a control image
        const at::Tensor got =
            family->predict(in.at("noisy"), in.at("timesteps"), flex2_conditioning(in, bypass));
        const at::Tensor want =
            expected.at(bypass ? "bypassed_with_control" : "guided_without_control");
        ASSERT_EQ(got.sizes(), want.sizes());
        const double error = max_error(got, want);
        std::cout << "flex2_predict (" << (bypass ? "bypassed, control" : "guidance 1, no control")
                  << "): max abs error " << error << " (tolerance 1e-5)\n";
        EXPECT_LE(error, 1e-5);
    }
    // An inpaint image: its alpha (1 keep) resized bilinearly to the latents as the trainer's
    // data does (TrainingData::inpaint_keep), then StepConditioning's inpaint input — the clean
    // latents where kept, and the inpaint mask.
    FamilyLoadOptions bypassed;
    bypassed.bypass_guidance_embedding = true;
    const auto flex2 = load_model_family(parity_dir() / "flex2", bypassed);
    const at::Tensor x0 = in.at("x0");
    const at::Tensor keep = at::upsample_bilinear2d(in.at("keep"), {x0.size(2), x0.size(3)},
                                                    /*align_corners=*/false);
    StepConditioning with_inpaint = flex2_conditioning(in, true);
    with_inpaint.inpaint = at::cat({x0 * keep, 1 - keep}, 1);
    const double inpaint_error =
        max_error(flex2->predict(in.at("noisy"), in.at("timesteps"), with_inpaint),
                  expected.at("bypassed_with_inpaint_and_control"));
    std::cout << "flex2_predict (bypassed, inpaint, control): max abs error " << inpaint_error
              << " (tolerance 1e-5)\n";
    EXPECT_LE(inpaint_error, 1e-5);
    EXPECT_GT(max_error(expected.at("bypassed_with_inpaint_and_control"),
                        expected.at("bypassed_with_control")),
              1e-4);

    // The bypass and the control matter: either one alone gives another prediction.
    const auto family = load_model_family(parity_dir() / "flex2", {});
    const at::Tensor guided_with_control =
        family->predict(in.at("noisy"), in.at("timesteps"), flex2_conditioning(in, true));
    EXPECT_GT(max_error(guided_with_control, expected.at("bypassed_with_control")), 1e-4);
    EXPECT_GT(max_error(guided_with_control, expected.at("guided_without_control")), 1e-4);
}

}  // namespace
}  // namespace loom
