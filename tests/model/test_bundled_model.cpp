// The bundled base model (datasets/loom-tiny-sd, issue 9): it loads as an SD 1.x model, its
// character-level tokenizer gives what transformers' CLIPTokenizer gives, and its VAE gives a
// drawn shape back — the checks that would catch a damaged or mismatched artifact.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "loom/model/sd/stable_diffusion.h"
#include "loom/model/tokenizers/clip_tokenizer.h"

namespace loom {
namespace {

const std::filesystem::path kModel = "datasets/loom-tiny-sd";

TEST(BundledBaseModel, LoadsAsSd1) {
    const StableDiffusion sd = load_stable_diffusion(kModel);
    EXPECT_EQ(sd.arch, config::Arch::kSd1);
    std::int64_t unet_params = 0;
    for (const auto& p : sd.unet->parameters()) unet_params += p.numel();
    EXPECT_GT(unet_params, 1'000'000);
    EXPECT_LT(unet_params, 3'000'000);  // small enough to commit
}

TEST(BundledBaseModel, TokenizerMatchesTransformers) {
    const CLIPTokenizer tok = CLIPTokenizer::from_folder(kModel / "tokenizer");
    // transformers.CLIPTokenizer.from_pretrained("datasets/loom-tiny-sd/tokenizer")(text):
    // no merges, so every word is spelled by its characters, the last one with </w>.
    const std::vector<std::int64_t> expected = {512, 320, 75, 64,  81, 70,  324, 81, 68,
                                                323, 89,  87, 336, 64, 339, 83,  71, 324,
                                                66,  68,  77, 83,  68, 337, 513};
    const std::vector<std::int64_t> ids = tok.encode("a large red zxq at the center");
    ASSERT_EQ(ids.size(), 77u);
    EXPECT_EQ(std::vector<std::int64_t>(ids.begin(), ids.begin() + 25), expected);
    EXPECT_EQ(ids[25], tok.pad_id());
}

TEST(BundledBaseModel, VaeGivesAShapeBack) {
    torch::NoGradGuard no_grad;
    StableDiffusion sd = load_stable_diffusion(kModel);
    // A white square on blue, 64x64, in [-1, 1].
    at::Tensor image = torch::empty({1, 3, 64, 64});
    image[0][0].fill_(40 / 127.5 - 1);
    image[0][1].fill_(80 / 127.5 - 1);
    image[0][2].fill_(220 / 127.5 - 1);
    image.index_put_({0, torch::indexing::Slice(), torch::indexing::Slice(16, 48),
                      torch::indexing::Slice(16, 48)},
                     0.92);
    const at::Tensor back = sd.vae->decode(sd.vae->encode(image).mean);
    const double rms = (back - image).pow(2).mean().sqrt().item<double>();
    EXPECT_LT(rms, 0.25) << "the VAE does not reconstruct a plain shape";
}

}  // namespace
}  // namespace loom
