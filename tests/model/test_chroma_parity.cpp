// Chroma's transformer against diffusers (label `parity`, issue 40): Flux's blocks without their
// modulation Linears, fed by the distilled-guidance approximator, with ChromaPipeline's attention
// mask added to the scores, within 1e-5 of ChromaTransformer2DModel on a tiny random folder.
// References: tests/parity/flux_reference.py (build_chroma_transformer).

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <iostream>

#include "loom/model/chroma/chroma_transformer.h"
#include "parity_cases.h"

namespace loom {
namespace {

using testing::max_error;
using testing::parity_dir;
using testing::read_case;

ChromaInputs chroma_inputs(const std::map<std::string, at::Tensor>& in) {
    ChromaInputs x;
    x.hidden_states = in.at("hidden_states");
    x.encoder_hidden_states = in.at("encoder_hidden_states");
    x.timestep = in.at("timestep");
    x.img_ids = in.at("img_ids");
    x.txt_ids = in.at("txt_ids");
    x.attention_mask = in.at("attention_mask");
    return x;
}

TEST(ChromaParity, TransformerWithTheApproximatorAndTheMask) {
    ChromaTransformer2DModel model =
        load_chroma_transformer(parity_dir() / "chroma" / "transformer");
    EXPECT_EQ(model->config().modulation_count(), 3 * 2 + 12 * 2 + 2);
    const auto in = read_case("chroma_transformer.inputs.safetensors");
    const at::Tensor expected = read_case("chroma_transformer.expected.safetensors").at("sample");
    torch::NoGradGuard no_grad;
    ChromaInputs x = chroma_inputs(in);
    const at::Tensor got = model->forward(x);
    ASSERT_EQ(got.sizes(), expected.sizes());
    const double error = max_error(got, expected);
    std::cout << "chroma_transformer: max abs error " << error << " (tolerance 1e-5)\n";
    EXPECT_LE(error, 1e-5);

    // The mask's bias matters: without it the prediction is another one.
    x.attention_mask = at::Tensor();
    EXPECT_GT(max_error(model->forward(x), expected), 1e-4);
}

// Recomputing the blocks in backward gives the gradients of keeping their activations (to
// float32 rounding).
TEST(ChromaParity, CheckpointedBlocksGiveTheSameGradients) {
    ChromaTransformer2DModel model =
        load_chroma_transformer(parity_dir() / "chroma" / "transformer");
    const ChromaInputs x = chroma_inputs(read_case("chroma_transformer.inputs.safetensors"));
    auto gradients = [&](bool checkpointing) {
        model->set_gradient_checkpointing(checkpointing);
        model->zero_grad();
        model->forward(x).square().mean().backward();
        std::vector<at::Tensor> g;
        for (const auto& p : model->parameters()) g.push_back(p.grad().clone());
        return g;
    };
    const auto plain = gradients(false);
    const auto recomputed = gradients(true);
    ASSERT_EQ(plain.size(), recomputed.size());
    for (std::size_t i = 0; i < plain.size(); ++i) {
        // Relative to the gradient's size: the recompute may sum in another order.
        const double scale = std::max(plain[i].abs().max().item<double>(), 1e-12);
        EXPECT_LE(max_error(plain[i], recomputed[i]) / scale, 1e-5) << "parameter " << i;
    }
}

}  // namespace
}  // namespace loom
