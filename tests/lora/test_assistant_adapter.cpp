// The assistant adapter (model.assistant_lora_path, lora/assistant_adapter.h) on a tiny Z-Image
// transformer: its file in ai-toolkit's layout (diffusion_model.<path>.lora_A/B) is merged into
// the base weights, changing the outputs; inside Removed the outputs are the base's again — with
// a trained LoRA attached, the base with that LoRA — and after it the merged model's; a folder
// with one .safetensors file names it, a missing path is an IoError.

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>

#include "loom/core/error.h"
#include "loom/lora/assistant_adapter.h"
#include "loom/lora/lora_network.h"
#include "loom/model/loading/tensor_file.h"
#include "loom/model/zimage/zimage_transformer.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

ZImageTransformer2DModel tiny(uint64_t seed) {
    torch::manual_seed(seed);
    ZImageConfig c;
    c.in_channels = 4;
    c.dim = 48;
    c.n_heads = 2;
    c.n_layers = 2;
    c.n_refiner_layers = 1;
    c.cap_feat_dim = 16;
    c.axes_dims = {8, 8, 8};
    c.axes_lens = {128, 32, 32};
    ZImageTransformer2DModel model(c);
    for (auto& p : model->parameters()) p.requires_grad_(false);
    model->eval();
    return model;
}

ZImageInputs inputs() {
    torch::manual_seed(5);
    ZImageInputs in;
    in.latents = torch::randn({1, 4, 4, 6});
    in.captions = torch::randn({1, 7, 16});
    in.caption_lengths = {7};
    in.timestep = torch::full({1}, 0.4);
    return in;
}

fs::path fresh_dir() {
    const fs::path dir =
        fs::temp_directory_path() / ("loom_assistant_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

// An assistant LoRA in ai-toolkit's file layout: rank 4 on two Linears of each main layer.
fs::path write_assistant(const fs::path& dir) {
    torch::manual_seed(9);
    NamedTensors tensors;
    for (const char* module : {"layers.0.attention.to_q", "layers.0.feed_forward.w2",
                               "layers.1.attention.to_v", "layers.1.adaLN_modulation.0"}) {
        const std::string stem = std::string("diffusion_model.") + module;
        const bool w2 = std::string(module).find("w2") != std::string::npos;
        const bool ada = std::string(module).find("adaLN") != std::string::npos;
        const int64_t in = w2 ? 128 : 48;
        const int64_t out = ada ? 4 * 48 : 48;
        tensors.emplace_back(stem + ".lora_A.weight", torch::randn({4, in}) * 0.3);
        tensors.emplace_back(stem + ".lora_B.weight", torch::randn({out, 4}) * 0.3);
    }
    const fs::path file = dir / "adapter" / "training_adapter.safetensors";
    fs::create_directories(file.parent_path());
    write_tensors(file, tensors);
    return file;
}

TEST(AssistantAdapter, MergedForTrainingTakenOutOfPreviews) {
    const fs::path dir = fresh_dir();
    const fs::path file = write_assistant(dir);
    EXPECT_EQ(locate_assistant_lora((dir / "adapter").string()), file);  // its folder names it
    EXPECT_THROW(locate_assistant_lora((dir / "nothing").string()), IoError);

    torch::NoGradGuard no_grad;
    ZImageTransformer2DModel model = tiny(1);
    const ZImageInputs in = inputs();
    const at::Tensor base = model->forward(in);
    AssistantAdapter assistant(*model, file, lora_model_of(config::Arch::kZImage));
    EXPECT_EQ(assistant.modules(), 4u);
    const at::Tensor merged = model->forward(in);
    EXPECT_GT((merged - base).abs().max().item<double>(), 1e-3);
    {
        AssistantAdapter::Removed removed(&assistant, at::kCPU);
        EXPECT_LE((model->forward(in) - base).abs().max().item<double>(), 1e-5);
    }
    EXPECT_LE((model->forward(in) - merged).abs().max().item<double>(), 1e-6);
    AssistantAdapter::Removed nothing(nullptr, at::kCPU);  // no assistant: a no-op
    fs::remove_all(dir);
}

TEST(AssistantAdapter, TheTrainedLoRAStaysInPreviews) {
    const fs::path dir = fresh_dir();
    const fs::path file = write_assistant(dir);
    torch::NoGradGuard no_grad;
    ZImageTransformer2DModel with_assistant = tiny(1);
    ZImageTransformer2DModel plain = tiny(1);
    AssistantAdapter assistant(*with_assistant, file, lora_model_of(config::Arch::kZImage));
    LoRANetworkOptions options;
    options.linear.rank = 2;
    options.linear.alpha = 2;
    options.rules.model = lora_model_of(config::Arch::kZImage);
    LoRANetwork trained = LoRANetwork::inject(*with_assistant, options);
    LoRANetwork same = LoRANetwork::inject(*plain, options);
    ASSERT_EQ(trained.targets().size(), same.targets().size());
    for (std::size_t i = 0; i < trained.targets().size(); ++i) {
        trained.targets()[i].adapter->up.normal_(0, 0.3);
        same.targets()[i].adapter->down.copy_(trained.targets()[i].adapter->down);
        same.targets()[i].adapter->up.copy_(trained.targets()[i].adapter->up);
    }
    const ZImageInputs in = inputs();
    const at::Tensor want = plain->forward(in);  // the base with the trained LoRA
    EXPECT_GT((with_assistant->forward(in) - want).abs().max().item<double>(), 1e-3);
    {
        AssistantAdapter::Removed removed(&assistant, at::kCPU);
        EXPECT_LE((with_assistant->forward(in) - want).abs().max().item<double>(), 1e-5);
    }
    fs::remove_all(dir);
}

}  // namespace
}  // namespace loom
