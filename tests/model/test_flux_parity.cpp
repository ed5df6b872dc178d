// Flux.1's transformer (dev and schnell), its 16-channel VAE and the latent packing against
// diffusers (label `parity`), within 1e-4. References come from tests/parity/flux_reference.py.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "loom/core/error.h"
#include "loom/model/flux/flux_model.h"
#include "loom/model/flux/flux_transformer.h"
#include "loom/model/loading/diffusers_folder.h"
#include "loom/model/loading/tensor_file.h"
#include "loom/model/loading/weight_files.h"
#include "loom/model/vae/autoencoder_kl.h"
#include "parity_cases.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using testing::max_error;
using testing::parity_dir;
using testing::read_case;

// A transformer case's inputs; `with_guidance` false drops the guidance scale.
FluxInputs flux_inputs(const std::map<std::string, at::Tensor>& in, bool with_guidance) {
    return {in.at("hidden_states"),
            in.at("encoder_hidden_states"),
            in.at("pooled_projections"),
            in.at("timestep"),
            in.at("img_ids"),
            in.at("txt_ids"),
            with_guidance && in.count("guidance") ? in.at("guidance") : at::Tensor()};
}

FluxTransformer2DModel load_transformer(const fs::path& dir) {
    FluxTransformer2DModel model(read_flux_config(dir / "config.json"));
    load_weights(*model, find_weight_files(dir), "Flux transformer");
    model->eval();
    return model;
}

void check_transformer(const fs::path& dir, const std::string& case_name) {
    FluxTransformer2DModel model = load_transformer(dir);
    const auto in = read_case(case_name + ".inputs.safetensors");
    const auto expected = read_case(case_name + ".expected.safetensors");
    torch::NoGradGuard no_grad;
    const FluxInputs inputs = flux_inputs(in, true);
    const double error = max_error(model->forward(inputs), expected.at("sample"));
    std::cout << case_name << ": max abs error " << error << " (tolerance 1e-4)\n";
    EXPECT_LE(error, 1e-4);
}

TEST(FluxParity, DevTransformerWithGuidance) {
    check_transformer(parity_dir() / "flux" / "transformer", "flux_transformer");
}

TEST(FluxParity, SchnellTransformerWithoutGuidance) {
    check_transformer(parity_dir() / "flux_schnell" / "transformer", "flux_schnell_transformer");
}

TEST(FluxParity, DevWithoutAGuidanceScaleIsAClearError) {
    FluxTransformer2DModel model = load_transformer(parity_dir() / "flux" / "transformer");
    const auto in = read_case("flux_transformer.inputs.safetensors");
    torch::NoGradGuard no_grad;
    const FluxInputs inputs = flux_inputs(in, false);
    EXPECT_THROW(model->forward(inputs), c10::Error);
}

TEST(FluxParity, PackingAndImageIdsAsThePipeline) {
    const auto in = read_case("flux_packing.inputs.safetensors");
    const auto expected = read_case("flux_packing.expected.safetensors");
    const at::Tensor latents = in.at("latents");
    const at::Tensor packed = flux_pack_latents(latents);
    EXPECT_TRUE(torch::equal(packed, expected.at("packed")));
    EXPECT_TRUE(torch::equal(flux_image_ids(latents.size(2), latents.size(3), at::kFloat),
                             expected.at("img_ids")));
    EXPECT_TRUE(torch::equal(flux_unpack_latents(packed, latents.size(2), latents.size(3)),
                             expected.at("unpacked")));
    EXPECT_TRUE(torch::equal(expected.at("unpacked"), latents));
}

TEST(FluxParity, SixteenChannelVaeWithoutQuantConvs) {
    const fs::path dir = parity_dir() / "flux" / "vae";
    const VAEConfig config = read_vae_config(dir / "config.json");
    EXPECT_EQ(config.latent_channels, 16);
    EXPECT_FALSE(config.use_quant_conv);
    ASSERT_TRUE(config.shift_factor.has_value());
    EXPECT_DOUBLE_EQ(*config.shift_factor, 0.1159);
    AutoencoderKL vae(config);
    load_weights(*vae, find_weight_files(dir), "Flux VAE");
    vae->eval();
    torch::NoGradGuard no_grad;
    const auto enc_in = read_case("flux_vae_encode.inputs.safetensors");
    const auto enc_out = read_case("flux_vae_encode.expected.safetensors");
    const LatentDistribution dist = vae->encode(enc_in.at("sample"));
    EXPECT_LE(max_error(dist.mean, enc_out.at("mean")), 1e-4);
    EXPECT_LE(max_error(dist.logvar, enc_out.at("logvar")), 1e-4);
    const auto dec_in = read_case("flux_vae_decode.inputs.safetensors");
    const auto dec_out = read_case("flux_vae_decode.expected.safetensors");
    EXPECT_LE(max_error(vae->decode(dec_in.at("latents")), dec_out.at("sample")), 1e-4);
}

TEST(FluxParity, PromptEncodingAsTheFluxPipeline) {
    FluxLoadOptions options;
    options.load_vae = false;
    FluxModel flux = load_flux(parity_dir() / "flux", options);
    EXPECT_TRUE(flux.guidance_distilled());
    EXPECT_TRUE(flux.scheduler.use_dynamic_shifting);
    std::ifstream in(parity_dir() / "cases" / "flux_prompts.json");
    const nlohmann::json spec = nlohmann::json::parse(in);
    const auto prompts = spec["prompts"].get<std::vector<std::string>>();
    const auto expected = read_case("flux_prompts.expected.safetensors");
    torch::NoGradGuard no_grad;
    const TextConditioning c =
        flux.encode_prompts(prompts, spec["max_sequence_length"].get<std::size_t>());
    const double context = max_error(c.context, expected.at("prompt_embeds"));
    const double pooled = max_error(c.text_embeds, expected.at("pooled_prompt_embeds"));
    std::cout << "flux_prompts: max abs error T5 " << context << ", CLIP pooled " << pooled
              << " (tolerance 1e-5)\n";
    EXPECT_LE(context, 1e-5);
    EXPECT_LE(pooled, 1e-5);
}

// A Flux folder missing a component, or listing one that is not there: one error naming the file
// and the component, before any weight is read.
TEST(FluxParity, AMissingComponentIsOneClearError) {
    const fs::path tmp = fs::temp_directory_path() / ("loom_flux_" + std::to_string(::getpid()));
    fs::remove_all(tmp);
    fs::copy(parity_dir() / "flux", tmp, fs::copy_options::recursive);
    const auto index = tmp / "model_index.json";
    nlohmann::json j = nlohmann::json::parse(std::ifstream(index));
    j.erase("text_encoder_2");
    std::ofstream(index) << j.dump();
    try {
        load_flux(tmp);
        ADD_FAILURE() << "no error";
    } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("'text_encoder_2'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("model_index.json"), std::string::npos) << e.what();
    }
    j["text_encoder_2"] = {"transformers", "T5EncoderModel"};
    std::ofstream(index) << j.dump();
    fs::remove_all(tmp / "tokenizer_2");
    try {
        load_flux(tmp);
        ADD_FAILURE() << "no error";
    } catch (const IoError& e) {
        EXPECT_NE(std::string(e.what()).find("tokenizer_2"), std::string::npos) << e.what();
    }
    fs::remove_all(tmp);
}

}  // namespace
}  // namespace loom
