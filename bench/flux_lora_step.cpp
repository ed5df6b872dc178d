// loom side of scripts/bench_flux.sh: one LoRA training step of the benchmark Flux transformer
// on the CPU — forward, flow-matching MSE, backward, loom's AdamW on the LoRA parameters — the
// same work as bench/flux_lora_step.py does with diffusers + peft. A ChromaPipeline folder
// (make_bench_flux.py --chroma) trains the Chroma transformer instead, with ChromaPipeline's mask
// over a prompt of a quarter of the text tokens.
//
//   flux_lora_step MODEL_DIR THREADS REPEATS BATCH LATENT_SIZE TEXT_TOKENS RANK
//
// Prints "step_seconds <s>" per timed step.

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <chrono>
#include <iostream>
#include <string>

#include "loom/lora/lora_network.h"
#include "loom/model/chroma/chroma_model.h"
#include "loom/model/flux/flux_model.h"
#include "loom/model/schedules/flow_match.h"
#include "loom/train/adamw.h"

int main(int argc, char** argv) {
    if (argc < 8) {
        std::cerr << "usage: flux_lora_step MODEL_DIR THREADS REPEATS BATCH LATENT_SIZE "
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
    const bool chroma = folder.pipeline_class == "ChromaPipeline";
    loom::FluxTransformer2DModel flux{nullptr};
    loom::ChromaTransformer2DModel chroma_model{nullptr};
    torch::nn::Module* model = nullptr;
    if (chroma) {
        chroma_model = loom::load_chroma_transformer(folder.dir("transformer"));
        model = chroma_model.get();
    } else {
        flux = loom::load_flux_transformer(folder);
        model = flux.get();
    }
    for (auto& p : model->parameters()) p.requires_grad_(false);
    loom::LoRANetworkOptions options;
    options.linear.rank = rank;
    options.linear.alpha = static_cast<double>(rank);
    options.rules.model =
        loom::lora_model_of(chroma ? loom::config::Arch::kChroma : loom::config::Arch::kFlux);
    loom::LoRANetwork network = loom::LoRANetwork::inject(*model, options);
    network.set_training(true);
    loom::AdamWOptions adam;
    adam.weight_decay = 0.01;
    loom::AdamW optimizer(network.parameters(), adam);
    model->train();

    torch::manual_seed(0);
    const loom::FluxConfig& c = chroma ? chroma_model->config().flux : flux->config();
    const at::Tensor latents = torch::randn({batch, c.in_channels / 4, size, size});
    const at::Tensor x0 = loom::flux_pack_latents(latents);
    const at::Tensor noise = torch::randn(x0.sizes());
    const at::Tensor text = torch::randn({batch, tokens, c.joint_attention_dim});
    const at::Tensor img_ids = loom::flux_image_ids(size, size, at::kFloat);
    const at::Tensor txt_ids = loom::flux_text_ids(tokens, at::kFloat);
    const at::Tensor sigma = torch::full({batch}, 0.6f);
    const at::Tensor t = sigma * 1000;
    loom::FluxInputs in{{}, text, {}, sigma, img_ids, txt_ids, torch::ones({batch})};
    loom::ChromaInputs chroma_in{{}, text, sigma, img_ids, txt_ids, {}};
    if (chroma) {
        // ChromaPipeline's mask: the prompt's tokens and the first padding one, every image token.
        const at::Tensor text_mask =
            (at::arange(tokens) <= tokens / 4).to(at::kFloat).expand({batch, tokens});
        chroma_in.attention_mask = loom::chroma_joint_mask(text_mask, x0.size(1));
    } else {
        in.pooled_projections = torch::randn({batch, c.pooled_projection_dim});
    }
    for (int i = 0; i < repeats + 1; ++i) {  // the first step warms up and is not printed
        using clock = std::chrono::steady_clock;
        const auto start = clock::now();
        const at::Tensor noisy = loom::flow_match_add_noise(x0, noise, t);
        in.hidden_states = chroma_in.hidden_states = noisy;
        const at::Tensor pred = chroma ? chroma_model->forward(chroma_in) : flux->forward(in);
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
