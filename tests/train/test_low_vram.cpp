// LowVramMode on the simulated device: raising the level right after memory ran out must not
// itself need free memory (the ladder applies it outside any retry).

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

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
    EXPECT_NO_THROW(mode.raise_to(2));
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
        if (level < 0) mode.raise_to(-level);
        const std::string when = "low_vram " + std::to_string(level);
        expect_channels_last(*model.unet, when);
        expect_channels_last(*model.vae, when);
        EXPECT_TRUE(model.unet->channels_last());
    }
    fs::remove_all(root);
}

}  // namespace
}  // namespace loom
