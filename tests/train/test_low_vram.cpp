// LowVramMode on the simulated device: raising the level right after memory ran out must not
// itself need free memory (the ladder applies it outside any retry).

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

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

}  // namespace
}  // namespace loom
