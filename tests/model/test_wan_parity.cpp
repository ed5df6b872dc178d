// Wan 2.1's transformer and VAE against diffusers (label `parity`): the transformer's prediction
// of a 3-frame and a 1-frame clip and the gradient with respect to the clip within 1e-4, with and
// without gradient checkpointing; the VAE's latent distribution of a 9-frame clip and of an
// image, and its decoding of 3 latent frames, within 1e-4. References come from
// tests/parity/wan_reference.py.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "loom/core/error.h"
#include "loom/model/loading/diffusers_folder.h"
#include "loom/model/loading/weight_files.h"
#include "loom/model/vae/wan_vae.h"
#include "loom/model/wan/wan_transformer.h"
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

AutoencoderKLWan load_vae() {
    const fs::path dir = parity_dir() / "wan" / "vae";
    AutoencoderKLWan vae(read_wan_vae_config(dir / "config.json"));
    load_weights(*vae, find_weight_files(dir), "Wan VAE");
    vae->eval();
    return vae;
}

// Nine frames are three chunks (1 + 4 + 4): the second and third see the causal caches of every
// convolution and temporal downsampling; three latent frames decode through the upsamplers'
// first-chunk path and their caches.
TEST(WanParity, VaeEncodesAndDecodesAsDiffusers) {
    AutoencoderKLWan vae = load_vae();
    EXPECT_EQ(vae->config().temporal_compression(), 4);
    EXPECT_EQ(vae->config().spatial_compression(), 8);
    const auto in = read_case("wan_vae.inputs.safetensors");
    const auto expected = read_case("wan_vae.expected.safetensors");
    torch::NoGradGuard no_grad;
    const LatentDistribution clip = vae->encode(in.at("clip"));
    const double mean_error = max_error(clip.mean, expected.at("mean"));
    const double logvar_error = max_error(clip.logvar, expected.at("logvar"));
    const LatentDistribution image = vae->encode(in.at("image"));
    const at::Tensor decoded = vae->decode(in.at("latents"));
    const double decode_error = max_error(decoded, expected.at("decoded"));
    std::cout << "wan_vae: encode max abs error " << std::max(mean_error, logvar_error)
              << ", decode " << decode_error << " (tolerance 1e-4)\n";
    EXPECT_LE(mean_error, 1e-4);
    EXPECT_LE(logvar_error, 1e-4);
    EXPECT_LE(max_error(image.mean, expected.at("image_mean")), 1e-4);
    EXPECT_LE(max_error(image.logvar, expected.at("image_logvar")), 1e-4);
    ASSERT_EQ(decoded.sizes(), expected.at("decoded").sizes());
    EXPECT_LE(decode_error, 1e-4);
    // The first frame depends on the first latent frame alone: causal all the way.
    const at::Tensor first = vae->decode(in.at("latents").narrow(2, 0, 1));
    EXPECT_LE(max_error(first, expected.at("decoded").narrow(2, 0, 1)), 1e-4);
}

TEST(WanParity, VaeNormalizesLatentsAsThePipeline) {
    AutoencoderKLWan vae = load_vae();
    const auto in = read_case("wan_vae.inputs.safetensors");
    const auto expected = read_case("wan_vae.expected.safetensors");
    const at::Tensor normalized = vae->normalize_latents(in.at("latents"));
    EXPECT_LE(max_error(normalized, expected.at("normalized")), 1e-6);
    EXPECT_LE(max_error(vae->denormalize_latents(normalized), in.at("latents")), 1e-5);
}

TEST(WanParity, VaeRefusesClipsItCannotEncodeByTheirShape) {
    AutoencoderKLWan vae = load_vae();
    torch::NoGradGuard no_grad;
    const auto message = [&](const at::Tensor& clip) {
        try {
            vae->encode(clip);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    EXPECT_NE(message(torch::zeros({1, 3, 8, 16, 16}))
                  .find("8 frames cannot be encoded: the "
                        "frame count must be 1 + 4k"),
              std::string::npos);
    EXPECT_NE(message(torch::zeros({1, 3, 0, 16, 16})).find("0 frames"), std::string::npos);
    EXPECT_NE(message(torch::zeros({1, 3, 5, 12, 16})).find("multiples of 8"), std::string::npos);
    EXPECT_NE(message(torch::zeros({1, 4, 5, 16, 16})).find("[batch, 3, frames"),
              std::string::npos);
    EXPECT_THROW(vae->decode(torch::zeros({1, 3, 2, 2, 2})), Error);
}

TEST(WanConfigFile, VaeOfWan22AndInconsistentListsAreRefusedByName) {
    test::TempDir dir;
    const fs::path file = dir / "config.json";
    const auto refused = [&](const std::string& json) {
        std::ofstream(file) << json;
        try {
            read_wan_vae_config(file);
        } catch (const FormatError& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    EXPECT_NE(refused(R"({"is_residual": true, "z_dim": 48})").find("'latents_mean' has 16"),
              std::string::npos);
    EXPECT_NE(refused(R"({"is_residual": true})").find("'is_residual'"), std::string::npos);
    EXPECT_NE(refused(R"({"patch_size": 2})").find("'patch_size'"), std::string::npos);
    EXPECT_NE(refused(R"({"temperal_downsample": [true, true]})").find("'temperal_downsample'"),
              std::string::npos);
    EXPECT_NE(refused(R"({"attn_scales": [0.5]})").find("'attn_scales'"), std::string::npos);
    EXPECT_NE(refused(R"({"dim_mult": [1, "2", 4, 4]})")
                  .find("'dim_mult' must be a non-empty list of positive integers"),
              std::string::npos);
    EXPECT_NE(
        refused(R"({"latents_mean": "zero"})").find("'latents_mean' must be a list of numbers"),
        std::string::npos);
    EXPECT_NE(refused(R"({"scale_factor_spatial": 16})").find("'scale_factor_spatial'"),
              std::string::npos);
    EXPECT_NE(refused(R"({"latents_std": [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0]})")
                  .find("'latents_std' entries must be positive"),
              std::string::npos);
    std::ofstream(file) << "{}";  // Wan 2.1's VAE: every default
    const WanVAEConfig wan21 = read_wan_vae_config(file);
    EXPECT_EQ(wan21.z_dim, 16);
    EXPECT_EQ(wan21.temporal_compression(), 4);
    EXPECT_EQ(wan21.spatial_compression(), 8);
    EXPECT_DOUBLE_EQ(wan21.latents_std[8], 3.2687);
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
