// Preview sampling: the batching knobs the OOM ladder turns change memory, not images.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "loom/model/preview_sampler.h"
#include "tiny_sd.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

TEST(PreviewSampler, BatchingDoesNotChangeTheImages) {
    const fs::path root =
        fs::temp_directory_path() / ("loom_preview_" + std::to_string(::getpid()));
    fs::remove_all(root);
    testing::make_tiny_sd(root);
    StableDiffusion model = load_stable_diffusion(root);
    std::vector<PreviewRequest> requests(3);
    requests[0].prompt = "a red square";
    requests[1].prompt = "a blue circle";
    requests[2].prompt = "a red square";
    requests[2].seed = 5;
    for (auto& r : requests) {
        r.width = 64;
        r.height = 64;
        r.steps = 3;
        r.negative = "blurry";
    }
    const at::Device cpu(at::kCPU);
    PreviewOptions together;
    PreviewOptions apart;
    apart.batch_prompts = false;
    apart.batch_guidance = false;
    const auto a = generate_previews(model, requests, together, cpu);
    const auto b = generate_previews(model, requests, apart, cpu);
    ASSERT_EQ(a.size(), 3u);
    for (std::size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].sizes(), (std::vector<int64_t>{64, 64, 3}));
        EXPECT_LE((a[i].to(at::kInt) - b[i].to(at::kInt)).abs().max().item<int>(), 1) << i;
    }
    // Different prompts or seeds give different images.
    EXPECT_GT((a[0].to(at::kInt) - a[1].to(at::kInt)).abs().max().item<int>(), 0);
    EXPECT_GT((a[0].to(at::kInt) - a[2].to(at::kInt)).abs().max().item<int>(), 0);
    PreviewOptions euler;
    euler.sampler = config::PreviewSampler::kEuler;
    EXPECT_EQ(generate_previews(model, {requests[0]}, euler, cpu).size(), 1u);
    fs::remove_all(root);
}

}  // namespace
}  // namespace loom
