// loom side of scripts/bench_optim.sh: the optimizer step alone on a LoRA's parameters — the
// rank-R down and up of every Linear of a Flux.1-dev-shaped block stack, shapes from
// bench/optimizer_step.py — for each train.optimizer loom offers: its state's bytes and the
// seconds of one step (after a warm-up step).
//
//   optimizer_step THREADS REPEATS RANK BLOCKS
//
// Prints "<optimizer> state_bytes <n> parameters <n> step_seconds <s>" per timed step.

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <chrono>
#include <iostream>
#include <string>

#include "loom/config/job.h"
#include "loom/train/optimizer.h"

namespace {

// The LoRA of `blocks` Flux.1-dev double-stream blocks (inner width 3072, MLP 12288): q, k, v,
// out, the added-context q/k/v/out, the two adaLN modulations (6 x 3072), two MLPs.
std::vector<at::Tensor> lora_parameters(int64_t rank, int64_t blocks) {
    const int64_t d = 3072;
    const std::vector<std::pair<int64_t, int64_t>> linears = {
        {d, d}, {d, d},     {d, d},     {d, d},     {d, d},     {d, d},     {d, d},
        {d, d}, {d, 6 * d}, {d, 6 * d}, {d, 4 * d}, {4 * d, d}, {d, 4 * d}, {4 * d, d}};
    torch::manual_seed(0);
    std::vector<at::Tensor> params;
    for (int64_t b = 0; b < blocks; ++b) {
        for (const auto& [in, out] : linears) {
            params.push_back((torch::randn({rank, in}) * 0.01).requires_grad_(true));
            params.push_back(torch::zeros({out, rank}).requires_grad_(true));
        }
    }
    return params;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 5) {
        std::cerr << "usage: optimizer_step THREADS REPEATS RANK BLOCKS\n";
        return 2;
    }
    at::set_num_threads(std::stoi(argv[1]));
    at::set_num_interop_threads(1);
    const int repeats = std::stoi(argv[2]);
    const int64_t rank = std::stoll(argv[3]);
    const int64_t blocks = std::stoll(argv[4]);
    for (const std::string name : {"adamw", "adamw8bit", "prodigy"}) {
        std::vector<at::Tensor> params = lora_parameters(rank, blocks);
        int64_t count = 0;
        for (const auto& p : params) count += p.numel();
        loom::config::TrainConfig train;
        train.optimizer = name;
        auto optimizer = loom::make_optimizer(train, params, false);
        const double lr = name == "prodigy" ? 1.0 : 1e-4;
        for (int i = 0; i <= repeats; ++i) {
            torch::manual_seed(100 + i);
            for (auto& p : params) p.mutable_grad() = torch::randn(p.sizes()) * 1e-3;
            const auto start = std::chrono::steady_clock::now();
            optimizer->step(lr);
            const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
            if (i == 0) continue;  // warm-up
            std::cout << name << " state_bytes " << optimizer->state_bytes() << " parameters "
                      << count << " step_seconds " << took.count() << std::endl;
        }
    }
    return 0;
}
