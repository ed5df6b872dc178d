// Wan 2.1 as a model family against diffusers' WanPipeline (label `parity`): the prompt
// embeddings (cleaned, trimmed, zero-padded to 512) within 1e-5, the previews' latents and clips
// with classifier-free guidance within 1e-4, and the family seam (what training encodes and
// predicts). References come from tests/parity/wan_reference.py (build_pipeline).

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <iostream>

#include "loom/core/error.h"
#include "loom/model/family.h"
#include "loom/model/vae/autoencoder_kl.h"
#include "loom/model/wan/wan_family.h"
#include "loom/model/wan/wan_preview_sampler.h"
#include "parity_cases.h"
#include "temp_dir.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using testing::max_error;
using testing::parity_dir;
using testing::read_case;

const std::vector<std::string> kPrompts = {"  a photo of  a sks dog &amp; a cat\n",
                                           "an astronaut riding a horse"};
const std::vector<std::string> kNegatives = {"blurry", ""};

WanModel load_pipeline() {
    return load_wan(parity_dir() / "wan" / "pipeline");
}

TEST(WanPipelineParity, PromptsAreEncodedTrimmedAndZeroPaddedAsThePipeline) {
    WanModel wan = load_pipeline();
    const auto expected = read_case("wan_pipeline.expected.safetensors");
    torch::NoGradGuard no_grad;
    const at::Tensor context = wan.encode_prompts(kPrompts, 512).context;
    const double error = max_error(context, expected.at("prompt_embeds"));
    std::cout << "wan prompt embeddings: max abs error " << error << " (tolerance 1e-5)\n";
    EXPECT_LE(error, 1e-5);
    // Past each prompt's tokens and "</s>": zeros, not the encoder's outputs for padding.
    EXPECT_EQ(context.narrow(1, 20, 492).abs().max().item<double>(), 0.0);
}

TEST(WanPipelineParity, PreviewsSampleAsThePipelineWithGuidance) {
    WanModel wan = load_pipeline();
    const auto in = read_case("wan_pipeline.inputs.safetensors");
    const auto expected = read_case("wan_pipeline.expected.safetensors");
    for (const int64_t frames : {1, 5}) {
        SCOPED_TRACE(frames);
        const std::string n = std::to_string(frames);
        const at::Tensor noise = in.at("noise_" + n);
        // Each request's noise is its own seed's draw (7 and 8), as prepare_latents makes it.
        EXPECT_TRUE(at::equal(wan_initial_noise(wan, 7, 32, 16, frames), noise.narrow(0, 0, 1)));
        EXPECT_TRUE(at::equal(wan_initial_noise(wan, 8, 32, 16, frames), noise.narrow(0, 1, 1)));
        const at::Tensor clip = wan_sample(wan, kPrompts, kNegatives, noise, 4, 4.0, 512);
        const double error = max_error(clip, expected.at("clip_" + n));
        std::cout << "wan preview, " << frames << " frame(s): max abs error " << error
                  << " (tolerance 1e-4)\n";
        ASSERT_EQ(clip.sizes(), expected.at("clip_" + n).sizes());
        EXPECT_LE(error, 1e-4);
    }
}

// The trainer's previews: a 5-frame request gives its clip [5, H, W, 3], the reference's frames
// in 8 bits; 40 frames would be sampled as the pipeline's 41.
TEST(WanPipelineParity, PreviewRequestsOfSeveralFramesGiveClips) {
    WanModel wan = load_pipeline();
    const auto expected = read_case("wan_pipeline.expected.safetensors");
    std::vector<PreviewRequest> requests(2);
    for (std::size_t i = 0; i < 2; ++i) {
        requests[i].prompt = kPrompts[i];
        requests[i].negative = kNegatives[i];
        requests[i].seed = 7 + static_cast<int64_t>(i);
        requests[i].width = 32;
        requests[i].height = 16;
        requests[i].steps = 4;
        requests[i].guidance_scale = 4.0;
        requests[i].frames = 5;
    }
    const auto clips = generate_wan_previews(wan, requests, PreviewOptions{}, at::kCPU, 512);
    ASSERT_EQ(clips.size(), 2u);
    for (int64_t k = 0; k < 2; ++k) {
        ASSERT_EQ(clips[k].sizes(), (std::vector<int64_t>{5, 16, 32, 3}));
        const auto want = to_rgb8(expected.at("clip_5")[k].transpose(0, 1));
        const at::Tensor diff = (clips[k].to(at::kInt) - at::stack(want).to(at::kInt)).abs().max();
        EXPECT_LE(diff.item<int>(), 1);  // 8-bit rounding of a 3e-6 difference
    }
    EXPECT_EQ(wan_pipeline_frames(40, 4), 41);
    EXPECT_EQ(wan_pipeline_frames(9, 4), 9);
    EXPECT_EQ(wan_pipeline_frames(1, 4), 1);
}

TEST(WanPipelineParity, TheFamilyEncodesImagesAsOneFrameClipsAndPredictsClips) {
    std::unique_ptr<ModelFamily> family = load_model_family(parity_dir() / "wan" / "pipeline");
    ASSERT_NE(dynamic_cast<WanFamily*>(family.get()), nullptr);
    EXPECT_EQ(family->arch(), config::Arch::kWan21);
    EXPECT_EQ(family->blocks().lora_targeting, LoRATargeting::kBlockLinears);
    EXPECT_EQ(family->objective_kind(), ObjectiveKind::kFlowMatch);
    EXPECT_DOUBLE_EQ(family->flow_match().shift, 3.0);
    EXPECT_EQ(family->bucket_divisibility(), 16);
    EXPECT_EQ(family->encoders().size(), 2u);  // the VAE and UMT5
    EXPECT_TRUE(family->blocks().contains("blocks.1.attn1.to_q"));
    EXPECT_FALSE(family->blocks().contains("condition_embedder.time_proj"));
    EXPECT_THROW(family->ddpm_schedule(), Error);
    torch::NoGradGuard no_grad;
    auto& wan = dynamic_cast<WanFamily&>(*family).model();
    const at::Tensor image = at::rand({1, 3, 16, 32}) * 2 - 1;
    const LatentDistribution d = family->encode_pixels(image);
    ASSERT_EQ(d.mean.sizes(), (std::vector<int64_t>{1, 4, 1, 2, 4}));
    EXPECT_TRUE(at::allclose(d.mean, wan.vae->encode(image.unsqueeze(2)).mean));
    // Training latents are the pipeline's normalised ones.
    EXPECT_TRUE(at::allclose(family->training_latents(d.mean), wan.vae->normalize_latents(d.mean)));
    StepConditioning c;
    c.context = family->encode_prompts({"a cat"}).context;
    EXPECT_EQ(c.context.size(1), 512);
    const at::Tensor noisy = at::randn({1, 4, 2, 2, 4});
    const at::Tensor t = at::full({1}, 500.0);
    EXPECT_TRUE(
        at::equal(family->predict(noisy, t, c), wan.transformer->forward(noisy, t, c.context)));
}

TEST(WanPromptClean, EntitiesUnescapedTwiceAndWhitespaceCollapsed) {
    EXPECT_EQ(wan_prompt_clean("  a  \t b\n\n"), "a b");
    EXPECT_EQ(wan_prompt_clean("cats &amp; dogs &amp;amp; &lt;3 &#233;t&#xE9;"),
              "cats & dogs & <3 \xC3\xA9t\xC3\xA9");
    EXPECT_EQ(wan_prompt_clean("a&nbsp;b"), "a b");  // U+00A0 is whitespace to Python's \s
    EXPECT_EQ(wan_prompt_clean("a\xE3\x80\x80"
                               "b"),
              "a b");  // U+3000
    EXPECT_EQ(wan_prompt_clean("R&D &unknown; &#;"), "R&D &unknown; &#;");
}

TEST(WanPipelineFolder, Wan22TwoExpertFoldersAreRefusedByName) {
    test::TempDir dir;
    std::ofstream(dir / "model_index.json") << R"({"_class_name": "WanPipeline",
        "boundary_ratio": 0.875, "transformer": ["diffusers", "WanTransformer3DModel"],
        "transformer_2": ["diffusers", "WanTransformer3DModel"]})";
    try {
        load_wan(dir.path());
        FAIL() << "a two-expert folder loaded";
    } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("'transformer_2': Wan 2.2's two-expert"),
                  std::string::npos)
            << e.what();
    }
    // A component missing from the index, or its folder missing, is named before any loading.
    std::ofstream(dir / "model_index.json") << R"({"_class_name": "WanPipeline",
        "transformer": ["diffusers", "WanTransformer3DModel"],
        "text_encoder": ["transformers", "UMT5EncoderModel"]})";
    std::filesystem::create_directories(dir / "transformer");
    try {
        load_wan(dir.path());
        FAIL() << "a folder without a VAE loaded";
    } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("has no 'vae' component"), std::string::npos);
    }
    std::filesystem::remove(dir / "transformer");
    WanLoadOptions transformer_only;
    transformer_only.load_vae = false;
    transformer_only.load_text_encoder = false;
    EXPECT_THROW(load_wan(dir.path(), transformer_only), IoError);  // transformer/ is missing
}

}  // namespace
}  // namespace loom
