// Wan 2.1's transformer against diffusers (label `parity`): the prediction of a 3-frame and a
// 1-frame clip and the gradient with respect to the clip within 1e-4, with and without gradient
// checkpointing. References come from tests/parity/wan_reference.py.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "loom/core/error.h"
#include "loom/model/diffusers_folder.h"
#include "loom/model/wan_transformer.h"
#include "parity_cases.h"
#include "temp_dir.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using testing::max_error;
using testing::parity_dir;
using testing::read_case;

WanTransformer3DModel load_transformer() {
    const fs::path dir = parity_dir() / "wan" / "transformer";
    WanTransformer3DModel model(read_wan_config(dir / "config.json"));
    load_weights(*model, find_weight_files(dir), "Wan transformer");
    model->eval();
    return model;
}

TEST(WanParity, TransformerPredictsAsDiffusers) {
    WanTransformer3DModel model = load_transformer();
    const auto in = read_case("wan_transformer.inputs.safetensors");
    const auto expected = read_case("wan_transformer.expected.safetensors");
    const at::Tensor clip = in.at("hidden_states");
    torch::NoGradGuard no_grad;
    const double error =
        max_error(model->forward(clip, in.at("timestep"), in.at("encoder_hidden_states")),
                  expected.at("sample"));
    std::cout << "wan_transformer: max abs error " << error << " (tolerance 1e-4)\n";
    EXPECT_LE(error, 1e-4);
    // One frame: an image is a one-frame clip.
    const double still = max_error(
        model->forward(clip.narrow(2, 0, 1), in.at("timestep"), in.at("encoder_hidden_states")),
        expected.at("one_frame"));
    EXPECT_LE(still, 1e-4);
}

// The gradient with respect to the clip flows back through every block (RoPE, both attentions,
// the modulation) as diffusers' autograd computes it; checkpointed blocks give the same.
TEST(WanParity, GradientAsDiffusersWithAndWithoutCheckpointing) {
    WanTransformer3DModel model = load_transformer();
    const auto in = read_case("wan_transformer.inputs.safetensors");
    const auto expected = read_case("wan_transformer.expected.safetensors");
    for (const bool checkpointing : {false, true}) {
        SCOPED_TRACE(checkpointing ? "checkpointing" : "plain");
        model->set_gradient_checkpointing(checkpointing);
        const at::Tensor clip = in.at("hidden_states").clone().requires_grad_(true);
        model->forward(clip, in.at("timestep"), in.at("encoder_hidden_states"))
            .pow(2)
            .mean()
            .backward();
        EXPECT_LE(max_error(clip.grad(), expected.at("grad")), 1e-5);
    }
}

TEST(WanParity, ClipsThatDoNotFitThePatchOrTheRopeAreClearErrors) {
    WanTransformer3DModel model = load_transformer();
    const auto in = read_case("wan_transformer.inputs.safetensors");
    torch::NoGradGuard no_grad;
    const at::Tensor text = in.at("encoder_hidden_states");
    const at::Tensor t = in.at("timestep");
    EXPECT_THROW(model->forward(torch::zeros({2, 4, 3, 7, 6}), t, text), c10::Error);  // odd rows
    EXPECT_THROW(model->forward(torch::zeros({2, 4, 3, 8, 6}), t.unsqueeze(1), text), c10::Error);
    // 66 frames: more positions than the tiny config's rope_max_seq_len (64).
    EXPECT_THROW(
        model->forward(torch::zeros({1, 4, 66, 2, 2}), t.narrow(0, 0, 1), text.narrow(0, 0, 1)),
        Error);
}

TEST(WanConfigFile, ImageToVideoAndOtherQkNormsAreRefusedByName) {
    test::TempDir dir;
    const fs::path file = dir / "config.json";
    const auto refused = [&](const std::string& json) {
        std::ofstream(file) << json;
        try {
            read_wan_config(file);
        } catch (const FormatError& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    EXPECT_NE(refused(R"({"image_dim": 1280, "added_kv_proj_dim": 5120})")
                  .find("'image_dim' is set: an image-to-video Wan transformer"),
              std::string::npos);
    EXPECT_NE(refused(R"({"qk_norm": "rms_norm"})").find("'qk_norm'"), std::string::npos);
    EXPECT_NE(refused(R"({"patch_size": [1, 2]})").find("'patch_size'"), std::string::npos);
    std::ofstream(file) << R"({"num_layers": 30, "num_attention_heads": 12, "ffn_dim": 8960})";
    const WanConfig small = read_wan_config(file);  // Wan 2.1 T2V 1.3B's sizes
    EXPECT_EQ(small.inner_dim(), 1536);
    EXPECT_EQ(small.rope_t_dim(), 44);
    EXPECT_EQ(small.rope_hw_dim(), 42);
}

}  // namespace
}  // namespace loom
