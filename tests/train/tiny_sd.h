#pragma once

// A tiny random SD 1.x model in diffusers layout and a small generated dataset, for trainer tests
// that must not need Python or downloads.

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "../common/source_dir.h"
#include "loom/data/image.h"
#include "loom/model/loading/diffusers_folder.h"
#include "loom/model/loading/tensor_file.h"
#include "loom/model/loading/weight_files.h"
#include "loom/model/sd/unet_2d_condition.h"
#include "loom/model/text/clip_text_model.h"
#include "loom/model/tokenizers/clip_tokenizer.h"
#include "loom/model/vae/autoencoder_kl.h"

namespace loom::testing {

namespace fs = std::filesystem;

inline void write_json(const fs::path& p, const nlohmann::json& j) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << j.dump(2);
}

// The tokenizer fixture of the model tests (a 1,044-token CLIP vocabulary).
inline fs::path tokenizer_fixture() {
    return testing::source_dir() / "tests" / "model" / "data" / "clip_tokenizer";
}

inline void make_tiny_sd(const fs::path& root) {
    fs::create_directories(root);
    write_json(root / "model_index.json", {{"_class_name", "StableDiffusionPipeline"},
                                           {"unet", {"diffusers", "UNet2DConditionModel"}},
                                           {"vae", {"diffusers", "AutoencoderKL"}},
                                           {"text_encoder", {"transformers", "CLIPTextModel"}},
                                           {"tokenizer", {"transformers", "CLIPTokenizer"}},
                                           {"scheduler", {"diffusers", "DDIMScheduler"}}});
    torch::manual_seed(0);
    const nlohmann::json unet_json = {{"block_out_channels", {32, 64}},
                                      {"layers_per_block", 1},
                                      {"down_block_types", {"DownBlock2D", "CrossAttnDownBlock2D"}},
                                      {"up_block_types", {"CrossAttnUpBlock2D", "UpBlock2D"}},
                                      {"cross_attention_dim", 32},
                                      {"attention_head_dim", 4},
                                      {"sample_size", 8}};
    write_json(root / "unet" / "config.json", unet_json);
    UNet2DConditionModel unet(read_unet_config(root / "unet" / "config.json"));
    save_weights(*unet, root / "unet" / "diffusion_pytorch_model.safetensors");

    const nlohmann::json vae_json = {
        {"block_out_channels", {32, 32}},
        {"down_block_types", {"DownEncoderBlock2D", "DownEncoderBlock2D"}},
        {"up_block_types", {"UpDecoderBlock2D", "UpDecoderBlock2D"}},
        {"layers_per_block", 1},
        {"latent_channels", 4},
        {"norm_num_groups", 32},
        {"scaling_factor", 0.18215}};
    write_json(root / "vae" / "config.json", vae_json);
    AutoencoderKL vae(read_vae_config(root / "vae" / "config.json"));
    save_weights(*vae, root / "vae" / "diffusion_pytorch_model.safetensors");

    fs::create_directories(root / "tokenizer");
    for (const char* f :
         {"vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"}) {
        fs::copy_file(tokenizer_fixture() / f, root / "tokenizer" / f,
                      fs::copy_options::overwrite_existing);
    }
    const CLIPTokenizer tok = CLIPTokenizer::from_folder(root / "tokenizer");
    write_json(root / "text_encoder" / "config.json", {{"vocab_size", tok.vocab_size()},
                                                       {"hidden_size", 32},
                                                       {"intermediate_size", 37},
                                                       {"num_hidden_layers", 2},
                                                       {"num_attention_heads", 4},
                                                       {"max_position_embeddings", 77},
                                                       {"hidden_act", "quick_gelu"},
                                                       {"eos_token_id", tok.eos_id()}});
    CLIPTextModel te(read_clip_text_config(root / "text_encoder" / "config.json", false));
    save_weights(*te, root / "text_encoder" / "model.safetensors");
    write_json(root / "scheduler" / "scheduler_config.json", {{"beta_start", 0.00085},
                                                              {"beta_end", 0.012},
                                                              {"beta_schedule", "scaled_linear"},
                                                              {"num_train_timesteps", 1000},
                                                              {"set_alpha_to_one", false},
                                                              {"steps_offset", 1}});
}

// Image `i` of a dataset: a coloured square on a plain background, w x h, with its caption
// sidecar ("a red square, picture i").
inline void write_square_image(const fs::path& folder, int i, int w, int h) {
    fs::create_directories(folder);
    data::Image img(w, h);
    for (int y = 0; y < h; ++y) {
        for (int x = 0; x < w; ++x) {
            const bool square = x > w / 4 && x < 3 * w / 4 && y > h / 4 && y < 3 * h / 4;
            std::uint8_t* px = img.at(x, y);
            px[0] = square ? 220 : static_cast<std::uint8_t>(20 * i);
            px[1] = square ? 40 : 90;
            px[2] = square ? static_cast<std::uint8_t>(30 * i) : 160;
        }
    }
    const std::string stem = "img" + std::to_string(i);
    data::write_png(folder / (stem + ".png"), img);
    std::ofstream(folder / (stem + ".txt")) << "a red square, picture " << i;
}

// `count` images in three sizes (48x32, 32x48, 32x32): three buckets at resolution 64.
inline void make_dataset(const fs::path& folder, int count) {
    for (int i = 0; i < count; ++i) {
        write_square_image(folder, i, (i % 3 == 0) ? 48 : 32, (i % 3 == 1) ? 48 : 32);
    }
}

// The largest absolute difference between two LoRA files' tensors (same keys, same order).
inline double max_lora_difference(const fs::path& a_file, const fs::path& b_file) {
    const NamedTensors a = read_all_tensors(a_file);
    const NamedTensors b = read_all_tensors(b_file);
    if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (a[i].first != b[i].first) return std::numeric_limits<double>::infinity();
        worst = std::max(worst, (a[i].second - b[i].second).abs().max().item<double>());
    }
    return worst;
}

}  // namespace loom::testing
