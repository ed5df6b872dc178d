// loom side of scripts/bench_unet.sh: UNet forward+backward time on the CPU, and the peak
// device memory of the same step with and without gradient checkpointing on the sim device.
//
//   unet_step MODEL_DIR THREADS REPEATS BATCH SIZE [--memory]
//
// Prints "step_seconds <s>" per timed step, or with --memory "peak_bytes plain|checkpointed <n>".

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <chrono>
#include <iostream>
#include <string>

#include "loom/device/device.h"
#include "loom/model/sd/stable_diffusion.h"

int main(int argc, char** argv) {
    if (argc < 6) {
        std::cerr << "usage: unet_step MODEL_DIR THREADS REPEATS BATCH SIZE [--memory]\n";
        return 2;
    }
    const std::string model = argv[1];
    const int threads = std::stoi(argv[2]);
    const int repeats = std::stoi(argv[3]);
    const int64_t batch = std::stoll(argv[4]);
    const int64_t size = std::stoll(argv[5]);
    const bool memory = argc > 6 && std::string(argv[6]) == "--memory";
    at::set_num_threads(threads);
    at::set_num_interop_threads(1);

    loom::UNet2DConditionModel unet = loom::load_unet(loom::read_diffusers_folder(model));
    unet->train();
    torch::manual_seed(0);
    const at::Tensor sample = torch::randn({batch, 4, size, size});
    const at::Tensor ctx = torch::randn({batch, 77, unet->config().cross_attention_dim[0]});
    const at::Tensor t = torch::full({batch}, 500, torch::kLong);

    if (memory) {
        auto device = loom::open_device({loom::DeviceKind::kSim}, 64ull << 30);
        for (int ckpt = 0; ckpt < 2; ++ckpt) {
            unet->set_gradient_checkpointing(ckpt == 1);
            unet->zero_grad(true);
            device->reset_peak();
            const std::uint64_t base = device->stats().allocated;
            unet->forward(sample, t, ctx).pow(2).mean().backward();
            std::cout << "peak_bytes " << (ckpt ? "checkpointed " : "plain ")
                      << device->stats().peak_allocated - base << "\n";
            unet->zero_grad(true);
        }
        return 0;
    }
    for (int i = 0; i < repeats + 1; ++i) {  // the first step warms up and is not printed
        unet->zero_grad(true);
        const auto start = std::chrono::steady_clock::now();
        unet->forward(sample, t, ctx).pow(2).mean().backward();
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (i > 0) std::cout << "step_seconds " << s << std::endl;
    }
    return 0;
}
