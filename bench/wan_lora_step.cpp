// loom side of scripts/bench_wan.sh: one LoRA training step of the benchmark Wan transformer —
// forward, flow-matching MSE, backward, loom's AdamW on the LoRA parameters — the same work as
// bench/wan_lora_step.py does with diffusers + peft. With DEVICE "sim" the model and the step
// live on the simulated device and the step's peak device memory is printed instead (the
// frames table of docs/BENCHMARKS.md); CHECKPOINTING 1 recomputes each block in backward.
//
//   wan_lora_step MODEL_DIR THREADS REPEATS BATCH LATENT_FRAMES LATENT_SIZE TEXT_TOKENS RANK
//                 [DEVICE=cpu] [CHECKPOINTING=0]
//
// Prints "step_seconds <s>" and "phase_seconds forward <f> backward <b> optimizer <o>" per timed
// step; on sim also "peak_bytes <n>" (the step's peak allocation above the model and LoRA).

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <chrono>
#include <iostream>
#include <string>

#include "loom/device/device.h"
#include "loom/device/device_spec.h"
#include "loom/device/host_memory.h"
#include "loom/lora/lora_network.h"
#include "loom/model/loading/diffusers_folder.h"
#include "loom/model/loading/weight_files.h"
#include "loom/model/schedules/flow_match.h"
#include "loom/model/wan/wan_transformer.h"
#include "loom/train/adamw.h"

int main(int argc, char** argv) {
    if (argc < 9) {
        std::cerr << "usage: wan_lora_step MODEL_DIR THREADS REPEATS BATCH LATENT_FRAMES "
                     "LATENT_SIZE TEXT_TOKENS RANK [DEVICE=cpu] [CHECKPOINTING=0]\n";
        return 2;
    }
    const int threads = std::stoi(argv[2]);
    const int repeats = std::stoi(argv[3]);
    const int64_t batch = std::stoll(argv[4]);
    const int64_t frames = std::stoll(argv[5]);
    const int64_t size = std::stoll(argv[6]);
    const int64_t tokens = std::stoll(argv[7]);
    const int64_t rank = std::stoll(argv[8]);
    const std::string device_name = argc > 9 ? argv[9] : "cpu";
    const bool checkpointing = argc > 10 && std::string(argv[10]) == "1";
    at::set_num_threads(threads);
    at::set_num_interop_threads(1);

    std::unique_ptr<loom::Device> device;
    if (device_name == "sim") {
        device = loom::open_device(loom::parse_device_spec("sim"), std::uint64_t{64} << 30);
    }
    const std::filesystem::path dir = std::filesystem::path(argv[1]) / "transformer";
    loom::WanTransformer3DModel model(loom::read_wan_config(dir / "config.json"));
    {
        loom::HostAllocations host;
        loom::load_weights(*model, loom::find_weight_files(dir), "transformer");
    }
    for (auto& p : model->parameters()) {
        p.requires_grad_(false);
        if (device) p.set_data(device->to_device(p.data()));
    }
    model->set_gradient_checkpointing(checkpointing);
    loom::LoRANetworkOptions options;
    options.linear.rank = rank;
    options.linear.alpha = static_cast<double>(rank);
    options.rules.model = loom::lora_model_of(loom::config::Arch::kWan21);
    loom::LoRANetwork network = loom::LoRANetwork::inject(*model, options);
    network.set_training(true);
    loom::AdamWOptions adam;
    adam.weight_decay = 0.01;
    loom::AdamW optimizer(network.parameters(), adam);
    model->train();

    torch::manual_seed(0);
    const loom::WanConfig& c = model->config();
    const at::Tensor x0 = torch::randn({batch, c.in_channels, frames, size, size});
    const at::Tensor noise = torch::randn(x0.sizes());
    const at::Tensor text = torch::randn({batch, tokens, c.text_dim});
    const at::Tensor t = torch::full({batch}, 600.0f);
    for (int i = 0; i < repeats + 1; ++i) {  // the first step warms up and is not printed
        using clock = std::chrono::steady_clock;
        if (device) device->reset_peak();
        const std::uint64_t before = device ? device->stats().allocated : 0;
        const auto start = clock::now();
        const at::Tensor pred = model->forward(loom::flow_match_add_noise(x0, noise, t), t, text);
        const auto forward_done = clock::now();
        at::mse_loss(pred, loom::flow_match_target(x0, noise)).backward();
        const auto backward_done = clock::now();
        optimizer.step(1e-4);
        optimizer.zero_grad();
        const auto end = clock::now();
        auto seconds = [](clock::time_point a, clock::time_point b) {
            return std::chrono::duration<double>(b - a).count();
        };
        if (i > 0) {
            std::cout << "step_seconds " << seconds(start, end) << "\n"
                      << "phase_seconds forward " << seconds(start, forward_done) << " backward "
                      << seconds(forward_done, backward_done) << " optimizer "
                      << seconds(backward_done, end) << "\n";
            if (device) {
                std::cout << "peak_bytes " << device->stats().peak_allocated - before << "\n";
            }
            std::cout << std::flush;
        }
    }
    return 0;
}
