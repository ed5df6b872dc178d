// LowVramMode on the simulated device: raising the level right after memory ran out must not
// itself need free memory (the ladder applies it outside any retry).

#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "loom/core/error.h"
#include "loom/device/device.h"
#include "loom/device/sim_allocator.h"
#include "loom/model/stable_diffusion.h"
#include "loom/train/low_vram.h"
#include "tiny_sd.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

TEST(LowVramMode, RaisingToBf16NeedsNoFreeDeviceMemory) {
    const fs::path root =
        fs::temp_directory_path() / ("loom_low_vram_" + std::to_string(::getpid()));
    testing::make_tiny_sd(root / "model");
    auto device = open_device({DeviceKind::kSim}, std::uint64_t{1} << 30);
    StableDiffusion model;
    {
        HostAllocations host;  // as the trainer loads: into host memory
        model = load_stable_diffusion(root / "model");
    }
    for (torch::nn::Module* m : {static_cast<torch::nn::Module*>(model.unet.get()),
                                 static_cast<torch::nn::Module*>(model.vae.get()),
                                 static_cast<torch::nn::Module*>(model.text_encoder.get())}) {
        for (auto& p : m->parameters()) p.requires_grad_(false);
    }
    LowVramMode mode(model, *device);
    mode.place_model(1);
    const std::uint64_t placed = device->stats().allocated;
    ASSERT_GT(placed, 0u);
    // 64 bytes of room: converting a weight in place on the device would need its bf16 copy
    // next to the float32 one.
    SimAllocator::install().set_budget(placed + 64);
    EXPECT_NO_THROW(mode.set_level(2));
    EXPECT_LT(device->stats().allocated, placed * 6 / 10);  // the UNet's weights halved
    EXPECT_EQ(model.unet->parameters().front().scalar_type(), at::kBFloat16);
    fs::remove_all(root);
}

// perf.channels_last: the conv weights are converted on the host before placement, and every
// level's copies keep the layout — the device copies (levels 0-2), bf16 conversion (2), the
// host-resident streamed weights that fetches copy from (3) — also when the level is raised on a
// placed model.
TEST(LowVramMode, ChannelsLastSurvivesEveryLevel) {
    const fs::path root =
        fs::temp_directory_path() / ("loom_low_vram_cl_" + std::to_string(::getpid()));
    testing::make_tiny_sd(root / "model");
    auto device = open_device({DeviceKind::kSim}, std::uint64_t{1} << 30);
    auto expect_channels_last = [](torch::nn::Module& m, const std::string& when) {
        std::size_t convs = 0;
        for (const auto& p : m.named_parameters()) {
            if (p.value().dim() != 4 || p.value().size(2) == 1) continue;  // 1x1: both layouts
            EXPECT_TRUE(p.value().is_contiguous(at::MemoryFormat::ChannelsLast))
                << when << ": " << p.key();
            ++convs;
        }
        EXPECT_GT(convs, 0u) << when;
    };
    for (const int level : {0, 1, 2, 3, -3}) {  // -3: placed at 0, then raised to 3
        StableDiffusion model;
        {
            HostAllocations host;
            model = load_stable_diffusion(root / "model");
        }
        for (auto& p : model.unet->parameters()) p.requires_grad_(false);
        LowVramMode mode(model, *device, PlacementOptions{false, true});
        mode.place_model(std::max(level, 0));
        if (level < 0) mode.set_level(-level);
        const std::string when = "low_vram " + std::to_string(level);
        expect_channels_last(*model.unet, when);
        expect_channels_last(*model.vae, when);
        EXPECT_TRUE(model.unet->channels_last());
    }
    fs::remove_all(root);
}

// The encoders moving in for the cache phase can run out of memory half-way: they go back to the
// host and the next scope still moves them (found by the ladder benchmark: a cache-phase OOM left
// the VAE on the device for the whole run).
TEST(LowVramMode, EncodersThatDoNotFitGoBackToTheHost) {
    const fs::path root =
        fs::temp_directory_path() / ("loom_low_vram_enc_" + std::to_string(::getpid()));
    testing::make_tiny_sd(root / "model");
    auto device = open_device({DeviceKind::kSim}, std::uint64_t{1} << 30);
    StableDiffusion model;
    {
        HostAllocations host;
        model = load_stable_diffusion(root / "model");
    }
    LowVramMode mode(model, *device);
    mode.place_model(1);
    const std::uint64_t placed = device->stats().allocated;
    SimAllocator::install().set_budget(placed + 4096);  // room for a weight or two, not all
    EXPECT_THROW(LowVramMode::EncodersOnDevice scope(mode), c10::OutOfMemoryError);
    EXPECT_EQ(device->stats().allocated, placed);
    SimAllocator::install().set_budget(std::uint64_t{1} << 30);
    {
        LowVramMode::EncodersOnDevice scope(mode);
        EXPECT_GT(device->stats().allocated, placed);
    }
    EXPECT_EQ(device->stats().allocated, placed);
    fs::remove_all(root);
}

// Level 3 goes back to 2 (the measured choice tries block streaming and may leave it): the
// streamed weights return to the device, the UNet computes the same output at 2, 3 and 2 again,
// and levels below 2 stay refused (bf16 cannot become float32 again).
TEST(LowVramMode, LevelThreeGoesBackToTwoAndComputesTheSame) {
    const fs::path root =
        fs::temp_directory_path() / ("loom_low_vram_back_" + std::to_string(::getpid()));
    testing::make_tiny_sd(root / "model");
    auto device = open_device({DeviceKind::kSim}, std::uint64_t{1} << 30);
    StableDiffusion model;
    {
        HostAllocations host;
        model = load_stable_diffusion(root / "model");
    }
    for (auto& p : model.unet->parameters()) p.requires_grad_(false);
    LowVramMode mode(model, *device);
    mode.place_model(2);
    torch::manual_seed(3);
    // bf16 in, as the training step feeds a bf16 base.
    const at::Tensor sample = device->to_device(torch::randn({1, 4, 8, 8}).to(at::kBFloat16));
    const at::Tensor timestep = device->to_device(torch::tensor({500}));
    const at::Tensor context = device->to_device(torch::randn({1, 5, 32}).to(at::kBFloat16));
    auto output = [&] {
        torch::NoGradGuard no_grad;
        return model.unet->forward(sample, timestep, context).to(at::kFloat).cpu();
    };
    const at::Tensor at_two = output();
    const std::uint64_t two = device->stats().allocated;
    mode.set_level(3);
    EXPECT_LT(device->stats().allocated, two);  // block weights on the host
    EXPECT_TRUE(torch::equal(output(), at_two));
    mode.set_level(2);
    EXPECT_EQ(mode.level(), 2);
    EXPECT_EQ(device->stats().allocated, two);  // every streamed weight is back
    EXPECT_TRUE(torch::equal(output(), at_two));
    EXPECT_THROW(mode.set_level(1), Error);
    fs::remove_all(root);
}

// The measured choice tries bf16 (level 2, 3) from float32 (level 1) and comes back: with the
// originals kept, level 1 returns exactly — the same weights, the same memory, the same output.
TEST(LowVramMode, WithTheFloat32WeightsKeptBf16GoesBackExactly) {
    const fs::path root =
        fs::temp_directory_path() / ("loom_low_vram_keep_" + std::to_string(::getpid()));
    testing::make_tiny_sd(root / "model");
    auto device = open_device({DeviceKind::kSim}, std::uint64_t{1} << 30);
    StableDiffusion model;
    {
        HostAllocations host;
        model = load_stable_diffusion(root / "model");
    }
    for (auto& p : model.unet->parameters()) p.requires_grad_(false);
    LowVramMode mode(model, *device);
    mode.place_model(1);
    torch::manual_seed(5);
    const at::Tensor sample = device->to_device(torch::randn({1, 4, 8, 8}));
    const at::Tensor timestep = device->to_device(torch::tensor({300}));
    const at::Tensor context = device->to_device(torch::randn({1, 5, 32}));
    auto output = [&] {
        torch::NoGradGuard no_grad;
        return model.unet->forward(sample, timestep, context).cpu();
    };
    const at::Tensor at_one = output();
    const std::uint64_t one = device->stats().allocated;
    for (const int trial : {2, 3}) {
        mode.keep_originals(true);
        mode.set_level(trial);
        EXPECT_LT(device->stats().allocated, one) << trial;
        mode.set_level(1);
        mode.keep_originals(false);
        EXPECT_EQ(mode.level(), 1);
        EXPECT_EQ(device->stats().allocated, one) << trial;
        EXPECT_EQ(model.unet->parameters().front().scalar_type(), at::kFloat);
        EXPECT_TRUE(torch::equal(output(), at_one)) << trial;
    }
    mode.set_level(2);  // without the originals: for good
    EXPECT_THROW(mode.set_level(1), Error);
    fs::remove_all(root);
}

}  // namespace
}  // namespace loom
