// Single-file SD 1.x and SDXL checkpoints (model/sd/single_file.h) against the diffusers folders
// they were converted from (label `parity`): tests/parity/single_file_reference.py writes both,
// and checks the file with diffusers' own from_single_file. loom must infer each component's
// config from the file and load every tensor equal to the folder's; the tokenizers and the
// scheduler come from the default repo in a Hugging Face cache; bad files are refused naming
// the file and what it holds.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "loom/core/error.h"
#include "loom/model/family.h"
#include "loom/model/loading/tensor_file.h"
#include "loom/model/sd/single_file.h"
#include "loom/model/sd/stable_diffusion.h"
#include "parity_cases.h"
#include "temp_dir.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using testing::parity_dir;

fs::path single_files() {
    return parity_dir() / "single_file";
}

// An environment whose only Hugging Face cache is `cache`.
EnvironmentLookup cache_env(const fs::path& cache) {
    return [cache](const std::string& name) -> std::optional<std::string> {
        if (name == "HF_HUB_CACHE") return cache.string();
        return std::nullopt;
    };
}

// Every parameter and buffer of `got` equals the same-named one of `want`, after `cast`.
void expect_same_tensors(torch::nn::Module& got, torch::nn::Module& want, const std::string& what,
                         at::ScalarType cast = at::kFloat) {
    std::map<std::string, at::Tensor> expected;
    for (const auto& p : want.named_parameters(true)) expected[p.key()] = p.value();
    for (const auto& b : want.named_buffers(true)) expected[b.key()] = b.value();
    std::size_t compared = 0;
    for (const auto& p : got.named_parameters(true)) {
        ASSERT_TRUE(expected.count(p.key())) << what << ": " << p.key();
        const at::Tensor w = expected.at(p.key()).to(cast).to(at::kFloat);
        EXPECT_TRUE(torch::equal(p.value(), w)) << what << "." << p.key() << " differs";
        ++compared;
    }
    EXPECT_EQ(compared, want.named_parameters(true).size()) << what;
}

void expect_same_unet_config(const UNetConfig& a, const UNetConfig& b) {
    EXPECT_EQ(a.in_channels, b.in_channels);
    EXPECT_EQ(a.out_channels, b.out_channels);
    EXPECT_EQ(a.down_block_types, b.down_block_types);
    EXPECT_EQ(a.up_block_types, b.up_block_types);
    EXPECT_EQ(a.block_out_channels, b.block_out_channels);
    EXPECT_EQ(a.layers_per_block, b.layers_per_block);
    EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
    EXPECT_EQ(a.cross_attention_dim, b.cross_attention_dim);
    EXPECT_EQ(a.use_linear_projection, b.use_linear_projection);
    EXPECT_EQ(a.addition_embed_type, b.addition_embed_type);
    if (a.addition_embed_type) {
        EXPECT_EQ(a.addition_time_embed_dim, b.addition_time_embed_dim);
        EXPECT_EQ(a.projection_class_embeddings_input_dim, b.projection_class_embeddings_input_dim);
    }
}

// The single file and its folder, loaded; the file's components equal the folder's.
void check_against_folder(const std::string& arch) {
    const fs::path file = single_files() / (arch + ".safetensors");
    StableDiffusion sd =
        load_stable_diffusion_single_file(file, {}, cache_env(single_files() / "hub"));
    StableDiffusion folder = load_stable_diffusion(single_files() / (arch + "_folder"));
    EXPECT_STREQ(config::to_string(sd.arch), arch.c_str());
    EXPECT_EQ(sd.folder.root, file);
    expect_same_unet_config(sd.unet->config(), folder.unet->config());
    expect_same_tensors(*sd.unet, *folder.unet, "unet");
    expect_same_tensors(*sd.vae, *folder.vae, "vae");
    EXPECT_DOUBLE_EQ(sd.vae->config().scaling_factor, folder.vae->config().scaling_factor);
    expect_same_tensors(*sd.text_encoder, *folder.text_encoder, "text_encoder");
    EXPECT_EQ(sd.scheduler.beta_schedule, folder.scheduler.beta_schedule);
    EXPECT_EQ(sd.scheduler.steps_offset, folder.scheduler.steps_offset);
    if (arch == "sdxl") {
        expect_same_tensors(*sd.text_encoder_2, *folder.text_encoder_2, "text_encoder_2");
        ASSERT_TRUE(sd.tokenizer_2);
        EXPECT_EQ(sd.tokenizer_2->encode("a photo of a cat"),
                  folder.tokenizer_2->encode("a photo of a cat"));
    }
    // The same model: the prompts' conditioning and a UNet step are equal.
    torch::NoGradGuard no_grad;
    const std::vector<std::string> prompts = {"a photo of a cat", "sks style portrait"};
    const TextConditioning a = sd.encode_prompts(prompts);
    const TextConditioning b = folder.encode_prompts(prompts);
    EXPECT_TRUE(torch::equal(a.context, b.context));
    torch::manual_seed(0);
    const at::Tensor latents = torch::randn({2, 4, 8, 8});
    const at::Tensor t = torch::tensor({10, 700});
    const at::Tensor ids = StableDiffusion::time_ids(64, 64, 2);
    const at::Tensor from_file = arch == "sdxl"
                                     ? sd.unet->forward(latents, t, a.context, a.text_embeds, ids)
                                     : sd.unet->forward(latents, t, a.context);
    const at::Tensor from_folder =
        arch == "sdxl" ? folder.unet->forward(latents, t, b.context, b.text_embeds, ids)
                       : folder.unet->forward(latents, t, b.context);
    EXPECT_TRUE(torch::equal(from_file, from_folder));
}

TEST(SingleFile, Sd1EqualsItsDiffusersFolder) {
    check_against_folder("sd1");
}

TEST(SingleFile, SdxlEqualsItsDiffusersFolder) {
    check_against_folder("sdxl");
}

TEST(SingleFile, HalfPrecisionFileLoadsIntoFloat32) {
    // Most checkpoints people hold are float16: loom casts each tensor as it loads it.
    test::TempDir tmp;
    NamedTensors half;
    for (auto& [name, t] : read_all_tensors(single_files() / "sd1.safetensors")) {
        half.emplace_back(name, t.is_floating_point() ? t.to(at::kHalf) : t);
    }
    write_tensors(tmp / "sd1_fp16.safetensors", half);
    StableDiffusion sd = load_stable_diffusion_single_file(tmp / "sd1_fp16.safetensors", {},
                                                           cache_env(single_files() / "hub"));
    StableDiffusion folder = load_stable_diffusion(single_files() / "sd1_folder");
    expect_same_tensors(*sd.unet, *folder.unet, "unet", at::kHalf);
    expect_same_tensors(*sd.text_encoder, *folder.text_encoder, "text_encoder", at::kHalf);
}

TEST(SingleFile, LoadModelFamilyTakesTheFileAsTrainingDoes) {
    ASSERT_EQ(setenv("HF_HUB_CACHE", (single_files() / "hub").c_str(), 1), 0);
    const auto family = load_model_family(single_files() / "sdxl.safetensors");
    unsetenv("HF_HUB_CACHE");
    EXPECT_EQ(family->arch(), config::Arch::kSdxl);
    EXPECT_EQ(family->root(), single_files() / "sdxl.safetensors");
    EXPECT_EQ(detect_single_file_arch(single_files() / "sd1.safetensors"), config::Arch::kSd1);
}

std::string error_of(const fs::path& file, const EnvironmentLookup& env) {
    try {
        load_stable_diffusion_single_file(file, {}, env);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(SingleFile, MissingTokenizerNamesTheCachesAndTheDownload) {
    test::TempDir empty;
    const std::string message =
        error_of(single_files() / "sdxl.safetensors", cache_env(empty.path()));
    EXPECT_NE(message.find("sdxl.safetensors"), std::string::npos) << message;
    EXPECT_NE(message.find(empty.path().string()), std::string::npos) << message;
    EXPECT_NE(message.find("huggingface-cli download stabilityai/stable-diffusion-xl-base-1.0 "
                           "--include 'tokenizer/*' 'tokenizer_2/*' 'scheduler/*'"),
              std::string::npos)
        << message;
    // Without the text encoders no tokenizer is needed (the scheduler then is SD's default).
    LoadOptions unet_only;
    unet_only.load_text_encoders = false;
    const StableDiffusion sd = load_stable_diffusion_single_file(
        single_files() / "sd1.safetensors", unet_only, cache_env(empty.path()));
    EXPECT_EQ(sd.scheduler.beta_schedule, "scaled_linear");
    EXPECT_FALSE(sd.text_encoder);
}

TEST(SingleFile, OtherFilesAreRefusedSayingWhatTheyAre) {
    const EnvironmentLookup env = cache_env(single_files() / "hub");
    test::TempDir tmp;
    // A diffusers component's file.
    std::string m = error_of(
        single_files() / "sd1_folder" / "unet" / "diffusion_pytorch_model.safetensors", env);
    EXPECT_NE(m.find("one diffusers component"), std::string::npos) << m;
    // A pickle checkpoint.
    std::ofstream(tmp / "model.ckpt") << "not read";
    m = error_of(tmp / "model.ckpt", env);
    EXPECT_NE(m.find("model.ckpt"), std::string::npos) << m;
    EXPECT_NE(m.find("pickle"), std::string::npos) << m;
    // A file cut short.
    const fs::path whole = single_files() / "sd1.safetensors";
    {
        std::ifstream in(whole, std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::ofstream(tmp / "cut.safetensors", std::ios::binary)
            .write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
    }
    m = error_of(tmp / "cut.safetensors", env);
    EXPECT_NE(m.find("cut.safetensors"), std::string::npos) << m;
    // One UNet tensor missing, and an inpainting UNet (9 input channels).
    NamedTensors missing, inpainting;
    for (auto& [name, t] : read_all_tensors(whole)) {
        if (name == "model.diffusion_model.output_blocks.4.1.proj_out.weight") continue;
        missing.emplace_back(name, t);
        inpainting.emplace_back(name, name == "model.diffusion_model.input_blocks.0.0.weight"
                                          ? at::cat({t, t.narrow(1, 0, 4), t.narrow(1, 0, 1)}, 1)
                                          : t);
    }
    write_tensors(tmp / "missing.safetensors", missing);
    m = error_of(tmp / "missing.safetensors", env);
    EXPECT_NE(m.find("missing.safetensors"), std::string::npos) << m;
    EXPECT_NE(m.find("1 missing (up_blocks.1.attentions.1.proj_out.weight)"), std::string::npos)
        << m;
    write_tensors(tmp / "inpainting.safetensors", inpainting);
    m = error_of(tmp / "inpainting.safetensors", env);
    EXPECT_NE(m.find("9 input channels"), std::string::npos) << m;
}

}  // namespace
}  // namespace loom
