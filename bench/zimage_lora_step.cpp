// loom side of scripts/bench_zimage.sh: one LoRA training step of the benchmark Z-Image
// transformer on the CPU through the family's objective — forward (the timestep as
// (1000 - t) / 1000, the output negated), flow-matching MSE, backward, loom's AdamW on the LoRA
// parameters — the same work as bench/zimage_lora_step.py does with diffusers + peft.
//
//   zimage_lora_step MODEL_DIR THREADS REPEATS BATCH LATENT_SIZE TEXT_TOKENS RANK
//
// Prints "step_seconds <s>" per timed step.

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <chrono>
#include <iostream>
#include <string>

#include "loom/lora/lora_network.h"
#include "loom/model/loading/diffusers_folder.h"
#include "loom/model/schedules/flow_match.h"
#include "loom/model/zimage/zimage_transformer.h"
#include "loom/train/adamw.h"

int main(int argc, char** argv) {
    if (argc < 8) {
        std::cerr << "usage: zimage_lora_step MODEL_DIR THREADS REPEATS BATCH LATENT_SIZE "
                     "TEXT_TOKENS RANK\n";
        return 2;
    }
    const int threads = std::stoi(argv[2]);
    const int repeats = std::stoi(argv[3]);
    const int64_t batch = std::stoll(argv[4]);
    const int64_t size = std::stoll(argv[5]);
    const int64_t tokens = std::stoll(argv[6]);
    const int64_t rank = std::stoll(argv[7]);
    at::set_num_threads(threads);
    at::set_num_interop_threads(1);

    const loom::DiffusersFolder folder = loom::read_diffusers_folder(argv[1]);
    loom::ZImageTransformer2DModel model = loom::load_zimage_transformer(folder.dir("transformer"));
    for (auto& p : model->parameters()) p.requires_grad_(false);
    loom::LoRANetworkOptions options;
    options.linear.rank = rank;
    options.linear.alpha = static_cast<double>(rank);
    options.rules.model = loom::lora_model_of(loom::config::Arch::kZImage);
    loom::LoRANetwork network = loom::LoRANetwork::inject(*model, options);
    network.set_training(true);
    loom::AdamWOptions adam;
    adam.weight_decay = 0.01;
    loom::AdamW optimizer(network.parameters(), adam);
    model->train();

    torch::manual_seed(0);
    const loom::ZImageConfig& c = model->config();
    const at::Tensor x0 = torch::randn({batch, c.in_channels, size, size});
    const at::Tensor noise = torch::randn(x0.sizes());
    loom::ZImageInputs in;
    in.captions = torch::randn({batch, tokens, c.cap_feat_dim});
    in.caption_lengths.assign(static_cast<std::size_t>(batch), tokens / 4);
    const at::Tensor t = torch::full({batch}, 600.0f);
    in.timestep = (1000 - t) / 1000;
    for (int i = 0; i < repeats + 1; ++i) {  // the first step warms up and is not printed
        using clock = std::chrono::steady_clock;
        const auto start = clock::now();
        in.latents = loom::flow_match_add_noise(x0, noise, t);
        const at::Tensor pred = -model->forward(in);
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
                      << seconds(backward_done, end) << std::endl;
        }
    }
    return 0;
}
