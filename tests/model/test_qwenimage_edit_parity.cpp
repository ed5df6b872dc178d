// Qwen-Image-Edit and Edit-2509 against diffusers and transformers (label `parity`), on the tiny
// random folders of tests/parity/qwen_edit_reference.py: PIL's resampling bit for bit, Qwen2-VL's
// processor (pixel values and grids), the vision tower's merged tokens over windows and full
// attention, the transformer with control grids on its sequence (MSRoPE frames), the prompts'
// embeddings with control images inside them, and seeded
// images of both pipelines with true CFG.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <fstream>
#include <iostream>

#include "loom/core/error.h"
#include "loom/model/loading/weight_files.h"
#include "loom/model/nn/pil_resize.h"
#include "loom/model/qwenimage/qwenimage_model.h"
#include "loom/model/qwenimage/qwenimage_preview_sampler.h"
#include "loom/model/qwenimage/qwenimage_transformer.h"
#include "loom/model/text/qwen2_5_vision.h"
#include "loom/model/text/qwen2_vl_image_processor.h"
#include "parity_cases.h"
#include "temp_dir.h"

namespace loom {
namespace {

using testing::max_error;
using testing::parity_dir;
using testing::read_case;

nlohmann::json edit_case_spec(const std::string& name) {
    std::ifstream in(parity_dir() / "cases" / (name + ".json"));
    return nlohmann::json::parse(in);
}

TEST(PilResize, EveryFilterBitForBitAsPil) {
    const auto in = read_case("pil_resize.inputs.safetensors");
    const auto expected = read_case("pil_resize.expected.safetensors");
    const auto sizes = edit_case_spec("pil_resize")["sizes"];
    const std::pair<const char*, PilFilter> filters[] = {{"bilinear", PilFilter::kBilinear},
                                                         {"bicubic", PilFilter::kBicubic},
                                                         {"lanczos", PilFilter::kLanczos}};
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        const at::Tensor image = in.at("image_" + std::to_string(i));
        const int64_t w = sizes[i][1][0], h = sizes[i][1][1];
        for (const auto& [name, filter] : filters) {
            const at::Tensor want = expected.at(std::string(name) + "_" + std::to_string(i));
            const at::Tensor got = pil_resize(image, w, h, filter);
            ASSERT_EQ(got.sizes(), want.sizes()) << name << " " << i;
            EXPECT_TRUE(got.equal(want))
                << name << " case " << i << ": "
                << (got.to(at::kInt) - want.to(at::kInt)).abs().max().item<int>() << " levels off";
        }
    }
}

TEST(QwenEditParity, ProcessorPatchesAndVisionTokensAsTransformers) {
    const std::filesystem::path folder = parity_dir() / "qwenimage_edit";
    const Qwen2VLImageProcessorConfig processor =
        read_qwen2_vl_image_processor(folder / "processor");
    EXPECT_EQ(processor.max_pixels, 12544);
    const auto in = read_case("qwen_vision.inputs.safetensors");
    const auto expected = read_case("qwen_vision.expected.safetensors");
    std::vector<VisionPatches> images;
    for (int i = 0; i < 2; ++i) {
        const std::string n = std::to_string(i);
        images.push_back(qwen2_vl_patches(processor, in.at("image_" + n)));
        const at::Tensor grid = expected.at("grid_" + n);
        EXPECT_EQ(images.back().grid_h, grid[1].item<int64_t>());
        EXPECT_EQ(images.back().grid_w, grid[2].item<int64_t>());
        ASSERT_EQ(images.back().pixel_values.sizes(), expected.at("pixel_values_" + n).sizes());
        EXPECT_LE(max_error(images.back().pixel_values, expected.at("pixel_values_" + n)), 1e-6);
    }
    Qwen2_5_Vision vision = load_qwen2_5_vision(folder / "text_encoder");
    EXPECT_EQ(vision->config().window_size, 56);
    torch::NoGradGuard no_grad;
    const at::Tensor tokens = vision->forward(images);
    ASSERT_EQ(tokens.sizes(), expected.at("tokens").sizes());
    const double error = max_error(tokens, expected.at("tokens"));
    std::cout << "qwen_vision: max abs error " << error << " (tolerance 1e-5)\n";
    EXPECT_LE(error, 1e-5);
    // One image alone gives its own rows: windows and full attention stay within an image.
    const at::Tensor first = vision->forward({images[0]});
    EXPECT_LE(max_error(first, expected.at("tokens").narrow(0, 0, first.size(0))), 1e-5);
}

TEST(QwenEditParity, TransformerWithControlGridsOnTheSequence) {
    QwenImageTransformer2DModel transformer =
        load_qwenimage_transformer(parity_dir() / "qwenimage_transformer");
    const auto in = read_case("qwenimage_transformer_controls.inputs.safetensors");
    const at::Tensor expected =
        read_case("qwenimage_transformer_controls.expected.safetensors").at("sample");
    QwenImageInputs inputs;
    inputs.hidden_states = in.at("hidden_states");
    inputs.encoder_hidden_states = in.at("encoder_hidden_states");
    inputs.encoder_hidden_states_mask = in.at("encoder_hidden_states_mask");
    inputs.timestep = in.at("timestep");
    inputs.height = 4;
    inputs.width = 6;
    inputs.control_grids = {{2, 3}, {3, 2}};
    torch::NoGradGuard no_grad;
    const double error = max_error(transformer->forward(inputs), expected);
    std::cout << "qwenimage_transformer_controls: max abs error " << error << " (tolerance 1e-5)\n";
    EXPECT_LE(error, 1e-5);
    // The controls' frames matter: the same tokens read as one grid's do not match.
    QwenImageInputs swapped = inputs;
    swapped.control_grids = {{3, 2}, {2, 3}};
    EXPECT_GT(max_error(transformer->forward(swapped), expected), 1e-4);
}

void expect_prompts(const std::string& folder, const std::string& name, std::size_t images) {
    QwenImageLoadOptions options;
    options.load_vae = false;
    QwenImageModel model = load_qwenimage(parity_dir() / folder, options);
    const auto in = read_case(name + ".inputs.safetensors");
    const auto expected = read_case(name + ".expected.safetensors");
    std::vector<at::Tensor> controls;
    for (std::size_t i = 0; i < images; ++i)
        controls.push_back(in.at("image_" + std::to_string(i)));
    const std::vector<std::string> prompts = {"make the cat blue",
                                              "Picture 1 in the style of a watercolour, at sunset"};
    torch::NoGradGuard no_grad;
    // Both prompts in one batch: each row is its prompt's own encoding, padded.
    const TextConditioning c = model.encode_edit_prompts(prompts, {controls, controls});
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        const at::Tensor want = expected.at("embeds_" + std::to_string(i));
        const int64_t n = want.size(0);
        EXPECT_EQ(c.context_mask[i].sum().item<int64_t>(), n) << name << " " << i;
        const double error = max_error(c.context[i].narrow(0, 0, n), want);
        std::cout << name << " " << i << ": max abs error " << error << " (tolerance 1e-5)\n";
        EXPECT_LE(error, 1e-5);
    }
}

TEST(QwenEditParity, EditPromptEmbeddingsWithTheControlImage) {
    expect_prompts("qwenimage_edit", "qwenimage_edit_prompts", 1);
}

TEST(QwenEditParity, EditPlusPromptEmbeddingsWithTwoPictures) {
    expect_prompts("qwenimage_edit_plus", "qwenimage_edit_plus_prompts", 2);
}

void expect_pipeline(const std::string& folder, const std::string& name) {
    QwenImageModel model = load_qwenimage(parity_dir() / folder);
    const nlohmann::json spec = edit_case_spec(name);
    const auto in = read_case(name + ".inputs.safetensors");
    std::vector<at::Tensor> controls;
    for (int i = 0; i < spec["images"].get<int>(); ++i)
        controls.push_back(in.at("image_" + std::to_string(i)));
    const at::Tensor expected = read_case(name + ".expected.safetensors").at("images");
    const at::Tensor noise =
        qwenimage_initial_noise(model, spec["seed"], spec["width"], spec["height"]);
    for (const bool batch : {false, true}) {
        const at::Tensor images = qwenimage_sample(
            model, {spec["prompt"].get<std::string>()}, {spec["negative"].get<std::string>()},
            noise, spec["steps"], spec["guidance"], 1024, batch, controls);
        const double error = max_error((images / 2 + 0.5).clamp(0, 1), expected);
        std::cout << name << (batch ? " (one batch)" : " (two passes)") << ": max abs error "
                  << error << " (tolerance 1e-4)\n";
        EXPECT_LE(error, 1e-4);
    }
}

TEST(QwenEditParity, SeededImagesAsQwenImageEditPipeline) {
    expect_pipeline("qwenimage_edit", "qwenimage_edit_pipeline");
}

TEST(QwenEditParity, SeededImagesAsQwenImageEditPlusPipelineWithTwoControls) {
    expect_pipeline("qwenimage_edit_plus", "qwenimage_edit_plus_pipeline");
}

// Bad inputs name what is wrong: a processor loom does not build, a text encoder without its
// vision tower, a prompt with the wrong number of control images, an empty resize.
TEST(QwenEditInputs, BadInputIsAnErrorNamingIt) {
    const test::TempDir dir;
    std::ofstream(dir.path() / "preprocessor_config.json") << R"({"resample": 2})";
    try {
        read_qwen2_vl_image_processor(dir.path());
        FAIL() << "a bilinear processor loaded";
    } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("resample"), std::string::npos) << e.what();
    }
    // The language model's weights alone: no vision tower to read control images with.
    std::filesystem::copy_file(parity_dir() / "qwenimage_edit" / "text_encoder" / "config.json",
                               dir.path() / "config.json");
    torch::nn::Module text_only;
    text_only.register_module("model", std::make_shared<torch::nn::Module>())
        ->register_module("norm", std::make_shared<torch::nn::Module>())
        ->register_parameter("weight", at::ones({32}));
    save_weights(text_only, dir.path() / "model.safetensors");
    try {
        load_qwen2_5_vision(dir.path());
        FAIL() << "a vision tower loaded from text-only weights";
    } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("no vision tower"), std::string::npos) << e.what();
    }
    QwenImageLoadOptions options;
    options.load_vae = false;
    QwenImageModel edit = load_qwenimage(parity_dir() / "qwenimage_edit", options);
    EXPECT_EQ(edit.variant, QwenImageVariant::kEdit);
    const at::Tensor image = at::zeros({30, 40, 3}, at::kByte);
    try {
        edit.encode_edit_prompts({"two pictures"}, {{image, image}});
        FAIL() << "Edit encoded two control images";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("one control image"), std::string::npos) << e.what();
    }
    EXPECT_THROW(pil_resize(image, 0, 10, PilFilter::kBicubic), Error);
}

}  // namespace
}  // namespace loom
